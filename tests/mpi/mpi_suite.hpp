#pragma once
#include <mpi.h>

#include <memory>

#include "tpipe/mpi/environment.hpp"
#include "tpipe/mpi/progress.hpp"

namespace tpipe_test {
//! The suite's progress thread (main owns it; the progress test stops and restarts it).
extern std::unique_ptr<tpipe::mpi::progress_thread> progress;

//! Whether every process of `c` passes `ok` (so that all processes agree on a test's outcome).
inline bool every_process(bool ok, MPI_Comm c = MPI_COMM_WORLD)
{
    int mine = ok ? 1 : 0, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, c);
    return all == 1;
}
} // namespace tpipe_test
