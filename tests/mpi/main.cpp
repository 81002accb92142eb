// The MPI suite's own main: MPI for the whole run, then Catch2 on every rank. The exit code is
// non-zero on every rank if any rank failed. Catch2's session: tests/catch_session.cpp.
#include "../catch_session.hpp"

#include "mpi_suite.hpp"

std::unique_ptr<tpipe::mpi::progress_thread> tpipe_test::progress;

int main(int argc, char** argv)
{
    // The progress thread is owned here rather than by the environment, so that the progress
    // test can also measure a run without it.
    tpipe::mpi::environment env(argc, argv, {.progress = false});
    tpipe_test::progress = std::make_unique<tpipe::mpi::progress_thread>();
    int failed = tpipe_test::run_catch(argc, argv);
    int any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    tpipe_test::progress.reset();
    return any ? 1 : 0;
}
