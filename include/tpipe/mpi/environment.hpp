#pragma once
// tpipe::mpi::environment: MPI for tpipe, for the lifetime of one object (construct it first
// in main, on every process).
//
// Thread level: tpipe requires MPI_THREAD_MULTIPLE, because several device loops of one
// process each post and test their own requests concurrently, and the progress thread
// (tpipe/mpi/progress.hpp) calls MPI while the loops compute. A library that provides less
// is refused with a tpipe::error.
//
// - Initialises MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE) and finalises it on destruction;
//   if the program initialised MPI itself, it only checks the thread level and leaves
//   finalisation to the program.
// - Starts one tpipe::mpi::progress_thread (options::progress) and stops it before MPI_Finalize.
// - tpipe's communicators (tpipe/mpi/communicator.hpp) are duplicates with MPI_ERRORS_RETURN;
//   failed calls become tpipe::mpi::mpi_error (tpipe/mpi/error.hpp, tpipe::mpi::check).
#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>

#include "tpipe/core/error.hpp"
#include "tpipe/mpi/error.hpp"
#include "tpipe/mpi/progress.hpp"

namespace tpipe::mpi {

//! What tpipe::mpi::environment starts besides MPI.
struct environment_options {
    bool progress = true;  //!< start the progress thread
    std::chrono::microseconds progress_interval{50};
};

class environment {
public:
    using options = environment_options;

    environment() : environment(nullptr, nullptr, options{}) {}
    explicit environment(options o) : environment(nullptr, nullptr, o) {}
    environment(int& argc, char**& argv, options o = {}) : environment(&argc, &argv, o) {}
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    ~environment()
    {
        progress_.reset();
        if (owns_) MPI_Finalize();
    }

    //! The thread level MPI provides (MPI_THREAD_MULTIPLE).
    int thread_level() const noexcept { return provided_; }
    //! Whether this object initialised MPI (and finalises it).
    bool owns_mpi() const noexcept { return owns_; }
    //! The progress thread, or nullptr when options::progress was false.
    progress_thread* progress() noexcept { return progress_.get(); }

private:
    environment(int* argc, char*** argv, options o)
    {
        int finalized = 0;
        check(MPI_Finalized(&finalized), "MPI_Finalized");
        if (finalized) throw tpipe::error("tpipe::mpi::environment: MPI was already finalised; construct the environment before MPI_Finalize");
        int initialized = 0;
        check(MPI_Initialized(&initialized), "MPI_Initialized");
        if (initialized) {
            check(MPI_Query_thread(&provided_), "MPI_Query_thread");
        } else {
            check(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided_), "MPI_Init_thread");
            owns_ = true;
        }
        if (provided_ < MPI_THREAD_MULTIPLE) {
            if (owns_) MPI_Finalize();
            throw tpipe::error("tpipe::mpi::environment: the MPI library provides thread level " + level_name(provided_) +
                               ", tpipe needs MPI_THREAD_MULTIPLE (several device loops post and test requests "
                               "concurrently, and a progress thread drives transfers while they compute); use an MPI "
                               "built with thread support (Open MPI: --enable-mpi-thread-multiple, the default since 3.0)" +
                               (owns_ ? "" : ", and initialise it with MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)"));
        }
        if (o.progress) progress_ = std::make_unique<progress_thread>(o.progress_interval);
    }

    static std::string level_name(int level)
    {
        switch (level) {
        case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
        case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
        case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
        default: return std::to_string(level);
        }
    }

    int provided_ = MPI_THREAD_SINGLE;
    bool owns_ = false;
    std::unique_ptr<progress_thread> progress_;
};

} // namespace tpipe::mpi
