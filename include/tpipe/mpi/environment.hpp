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
// - Starts one tpipe::mpi::progress_thread (options::progress; by default only where the node
//   has more cores than MPI processes) and stops it before MPI_Finalize.
// - While it lives, an exception that leaves main (std::terminate) prints its message and ends
//   the process with status 1 (mpirun then ends the job), instead of std::abort, which Open
//   MPI's signal handler turns into a backtrace that hides the message.
// - An exception that leaves the environment's scope does not finalise MPI (the peers may wait
//   for this process); the handler catching it prints it and calls end_job_on_error.
// - On destruction after a communicator's watchdog gave up on a silent member
//   (tpipe/mpi/stall_watch.hpp), it ends the job with MPI_Abort instead of MPI_Finalize, which
//   would wait for that member; with a watchdog set but none fired, the wait for the other
//   processes before MPI_Finalize is bounded by it (finalize_within).
// - options::watchdog bounds the blocking set-up collectives (tpipe/mpi/setup_watch.hpp): a
//   process stopped before the first step is named, and the job ends, instead of hanging.
// - tpipe's communicators (tpipe/mpi/communicator.hpp) are duplicates with MPI_ERRORS_RETURN;
//   failed calls become tpipe::mpi::mpi_error (tpipe/mpi/mpi_error.hpp, tpipe::mpi::check).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "tpipe/core/error.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/mpi/setup_watch.hpp"
#include "tpipe/mpi/stall_watch.hpp"

namespace tpipe::mpi {

namespace detail {
//! std::terminate after MPI_Init: the exception's message, then exit status 1 (no abort).
[[noreturn]] inline void end_process_on_uncaught() noexcept
{
    std::string what = "std::terminate without an exception";
    if (std::exception_ptr e = std::current_exception()) {
        try {
            std::rethrow_exception(e);
        } catch (const std::exception& x) {
            what = x.what();
        } catch (...) {
            what = "an uncaught exception that is not a std::exception";
        }
    }
    int me = -1, up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) MPI_Comm_rank(MPI_COMM_WORLD, &me);
    std::fprintf(stderr, "process %d: uncaught: %s\n", me, what.c_str());
    std::fflush(stderr);
    std::_Exit(1);
}
} // namespace detail

//! For a program's top-level error handler, after it printed why: ends every process of the job
//! with `status` (MPI_Abort) while MPI is up, so that a failure on one process (a --save
//! directory it cannot create, say) never leaves the others waiting for it. Without MPI, or
//! after MPI_Finalize, it returns and the caller exits as usual.
inline void end_job_on_error(int status) noexcept
{
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, status);
    }
}

//! What tpipe::mpi::environment starts besides MPI.
struct environment_options {
    //! Start the progress thread. Unset: only where this node has more cores than MPI processes,
    //! i.e. a core the thread does not take from a loop: with every core running a loop it cost
    //! the libtorch trainer 29 % of its tokens/s in the run, though on an oversubscribed
    //! node it doubled them (docs/libtorch.md, "MPI progress thread"); with a spare core it moves
    //! rendezvous transfers over TCP during long computes (docs/communicators.md).
    std::optional<bool> progress;
    std::chrono::microseconds progress_interval{50};
    //! Bounds the blocking set-up before a communicator has a watchdog of its own (0: none): the
    //! launch agreement (tpipe::mpi::agree), transports (their layout agreement, the runner's
    //! agree), communicators' construction, duplicate(), split() and set_watchdog(). A process
    //! that does not arrive within it is named by the others (tpipe::watchdog_error) and the job
    //! ends (tpipe/mpi/setup_watch.hpp); MPI_Finalize is bounded by it too. Give it the bound of
    //! the job's communicators' watchdog.
    std::chrono::milliseconds watchdog{0};
};

class environment {
public:
    using options = environment_options;

    environment() : environment(nullptr, nullptr, options{}) {}
    explicit environment(options o) : environment(nullptr, nullptr, o) {}
    environment(int& argc, char**& argv, options o = {}) : environment(&argc, &argv, o) {}
    environment(const environment&) = delete;
    environment& operator=(const environment&) = delete;
    //! Finalises MPI, except while an exception leaves the environment's scope: the other
    //! processes may be waiting for this one (in a barrier, say) and MPI_Finalize, collective,
    //! would wait for them before anything is printed. MPI stays up for the handler that catches
    //! the exception to print it and end the job (end_job_on_error).
    ~environment()
    {
        std::set_terminate(previous_terminate_);
        progress_.reset();
        if (std::uncaught_exceptions() > uncaught_at_start_) return;
        // A communicator's watchdog gave up on a member (a stopped process): MPI_Finalize would
        // wait for it.
        if (owns_ && detail::member_stalled().load(std::memory_order_relaxed)) {
            std::fflush(stdout);
            std::fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        if (watches_setup_) detail::unbound_setup();  // its notes' communicator goes before MPI_Finalize
        if (!owns_) return;
        finalize_within(std::chrono::milliseconds(detail::largest_watchdog_ms().load()));
    }

    //! The thread level MPI provides (MPI_THREAD_MULTIPLE).
    int thread_level() const noexcept { return provided_; }
    //! Whether this object initialised MPI (and finalises it).
    bool owns_mpi() const noexcept { return owns_; }
    //! The progress thread, or nullptr when options::progress was false.
    progress_thread* progress() noexcept { return progress_.get(); }

private:
    //! MPI_Finalize, collective, waits for every process: one stopped after its last collective
    //! would hang the others here. With a watchdog bound (any communicator's set_watchdog), the
    //! processes first meet in a barrier polled for that long; past it the job ends (MPI_Abort)
    //! naming the wait. Without one, MPI_Finalize as it is.
    static void finalize_within(std::chrono::milliseconds bound)
    {
        if (bound.count() > 0) {
            MPI_Request req = MPI_REQUEST_NULL;
            int done = 0;
            if (MPI_Ibarrier(MPI_COMM_WORLD, &req) == MPI_SUCCESS) {
                const auto until = std::chrono::steady_clock::now() + bound;
                while (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done && std::chrono::steady_clock::now() < until)
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
            }
            if (!done) {
                int me = 0;
                MPI_Comm_rank(MPI_COMM_WORLD, &me);
                std::fflush(stdout);
                std::fprintf(stderr, "tpipe::mpi::environment: process %d: the job's other processes did not all reach "
                                     "MPI_Finalize within the watchdog bound (%.1f s): one is stopped or hung; ending the job\n",
                             me, static_cast<double>(bound.count()) / 1000.0);
                std::fflush(stderr);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        MPI_Finalize();
    }

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
        if (o.watchdog.count() < 0)
            throw invalid_argument("tpipe::mpi::environment: the watchdog bound " + std::to_string(o.watchdog.count()) +
                                   " ms is negative; give a positive bound, or 0 for none");
        // Every process makes the set-up watchdog's notes communicator, whatever its bound: a
        // collective made by some processes only would hang the others.
        MPI_Comm notes = MPI_COMM_NULL;
        check(MPI_Comm_dup(MPI_COMM_WORLD, &notes), "MPI_Comm_dup (set-up watchdog notes)");
        detail::bound_setup(notes, o.watchdog);
        watches_setup_ = o.watchdog.count() > 0;
        if (o.progress.value_or(spare_core())) progress_ = std::make_unique<progress_thread>(o.progress_interval);
        previous_terminate_ = std::set_terminate(&detail::end_process_on_uncaught);
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

    //! More cores on this node than MPI processes (mpirun may bind each to one core; the
    //! thread then shares its rank's core, as measured).
    static bool spare_core()
    {
        MPI_Comm node = detail::setup_make("tpipe::mpi::environment (MPI_Comm_split_type)", [](MPI_Comm* out) {
            return MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, out);
        });
        int here = 1;
        MPI_Comm_size(node, &here);
        MPI_Comm_free(&node);
        return static_cast<int>(std::thread::hardware_concurrency()) > here;
    }

    int provided_ = MPI_THREAD_SINGLE;
    bool owns_ = false;
    bool watches_setup_ = false;
    int uncaught_at_start_ = std::uncaught_exceptions();
    std::unique_ptr<progress_thread> progress_;
    std::terminate_handler previous_terminate_ = nullptr;
};

} // namespace tpipe::mpi
