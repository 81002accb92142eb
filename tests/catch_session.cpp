// Catch2's implementation, compiled once for every test executable: the plain suites' main
// (catch_main.cpp) and the suites with a main of their own (MPI, GPU) link it. Under the
// sanitizers it was one of the slowest translation units, and it was compiled twice per build.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_session.hpp"

int tpipe_test::run_catch(int argc, char* argv[]) { return Catch::Session().run(argc, argv); }
