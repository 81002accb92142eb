#pragma once
// Runs Catch2's session (tests/catch_session.cpp holds its implementation, compiled once for
// every test executable; Catch::Session is declared only where the implementation is).
namespace tpipe_test {
int run_catch(int argc, char* argv[]);
}
