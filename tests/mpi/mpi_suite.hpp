#pragma once
#include <memory>

#include "tpipe/mpi/environment.hpp"
#include "tpipe/mpi/progress.hpp"

namespace tpipe_test {
//! The suite's progress thread (main owns it; the progress test stops and restarts it).
extern std::unique_ptr<tpipe::mpi::progress_thread> progress;
} // namespace tpipe_test
