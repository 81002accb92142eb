// The main of the plain test suites.
#include "catch_session.hpp"

int main(int argc, char* argv[]) { return tpipe_test::run_catch(argc, argv); }
