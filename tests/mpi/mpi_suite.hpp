#pragma once
#include <mpi.h>

#include <chrono>
#include <memory>
#include <utility>

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

//! Spins for `d` without calling MPI: the compute during which only a progress thread moves data.
inline void compute_for(std::chrono::milliseconds d)
{
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {}
}

//! The largest of every process's `seconds`.
inline double slowest(double seconds, MPI_Comm c = MPI_COMM_WORLD)
{
    double all = 0;
    MPI_Allreduce(&seconds, &all, 1, MPI_DOUBLE, MPI_MAX, c);
    return all;
}

//! {with, without}: `trial()` (collective, returning the same seconds on every process) with the
//! suite's progress thread, then with it stopped; the thread runs again afterwards.
template <class Trial>
std::pair<double, double> with_and_without_progress(Trial&& trial)
{
    const double with = trial();
    progress.reset();
    const double without = trial();
    progress = std::make_unique<tpipe::mpi::progress_thread>();
    return {with, without};
}
} // namespace tpipe_test
