#pragma once
// tpipe::mpi::progress_thread: drives Open MPI's progress engine while the loops compute.
//
// Why: Open MPI progresses a message only inside MPI calls of the processes involved. A
// rendezvous-sized send (above the eager limit, a few KiB to 64 KiB on shared memory and TCP)
// posted before a long compute would otherwise move only when its loop next tests it, i.e.
// after the compute. While any tpipe MPI operation is outstanding (tpipe::mpi::request_wait
// and the communicator's collectives count themselves in detail::outstanding()), the thread
// calls MPI_Iprobe on a private duplicate of MPI_COMM_SELF (so it never matches or consumes a
// message, and never touches the loops' requests) and runs the registered progress hooks
// (an MPI link posts a body's receive as soon as its header is in) every `interval`,
// sleeping in between (not spinning: it costs little on a machine with few cores). It skips a
// tick (probe and hooks) when a loop has called MPI_Test since the last one (a polling loop
// drives progress itself, and a probe would only contend for MPI's lock: measured +0.2 us per
// small message and -10 % bandwidth in ping-pong without the skip). With nothing outstanding it sleeps on the counter (a futex)
// until an operation is posted.
//
// Owned by tpipe::mpi::environment (one per process, on by default), or constructed on its
// own after MPI is initialised with MPI_THREAD_MULTIPLE (it calls MPI from its own thread).
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/mpi/mpi_error.hpp"

namespace tpipe::mpi {

namespace detail {
//! Number of tpipe MPI operations in flight in this process.
inline std::atomic<int>& outstanding() noexcept
{
    static std::atomic<int> n{0};
    return n;
}
inline void begin_outstanding() noexcept
{
    if (outstanding().fetch_add(1, std::memory_order_seq_cst) == 0) outstanding().notify_all();
}
inline void end_outstanding() noexcept { outstanding().fetch_sub(1, std::memory_order_release); }

//! Something the progress thread advances on each tick besides MPI's own engine: a
//! tpipe::mpi::link posts a body's receive once its header has arrived, so that a body
//! moves while the receiving loop computes. progress() must not block (it try-locks).
class progress_hook {
public:
    virtual void progress() noexcept = 0;

protected:
    ~progress_hook() = default;
};

struct progress_hooks {
    std::mutex m;
    std::vector<progress_hook*> list;
};
inline progress_hooks& hooks() noexcept
{
    static progress_hooks h;
    return h;
}
inline void add_progress_hook(progress_hook* h)
{
    std::lock_guard<std::mutex> g(hooks().m);
    hooks().list.push_back(h);
}
//! After it returns, the progress thread no longer calls h.
inline void remove_progress_hook(progress_hook* h) noexcept
{
    std::lock_guard<std::mutex> g(hooks().m);
    std::erase(hooks().list, h);
}
//! Runs every hook but `skip` (a hook that calls this while holding its own lock). A hook that
//! calls it from inside a run on the same thread (the progress thread's tick reaching a channel
//! that asks for it) returns at once: this thread is running them already.
inline void run_progress_hooks(const progress_hook* skip = nullptr) noexcept
{
    static thread_local bool running = false;
    if (running) return;
    running = true;
    {
        std::lock_guard<std::mutex> g(hooks().m);
        for (progress_hook* h : hooks().list)
            if (h != skip) h->progress();
    }
    running = false;
}

//! Set by every MPI_Test of a loop's poller: a loop that polls drives progress itself.
inline std::atomic<bool>& loop_tested() noexcept
{
    static std::atomic<bool> flag{false};
    return flag;
}
inline void note_tested() noexcept
{
    auto& f = loop_tested();
    if (!f.load(std::memory_order_relaxed)) f.store(true, std::memory_order_relaxed);  // no write while set
}
} // namespace detail

class progress_thread {
public:
    //! Starts the thread. MPI must be initialised with MPI_THREAD_MULTIPLE.
    explicit progress_thread(std::chrono::microseconds interval = std::chrono::microseconds(50)) : interval_(interval)
    {
        int level = MPI_THREAD_SINGLE;
        check(MPI_Query_thread(&level), "MPI_Query_thread");
        if (level < MPI_THREAD_MULTIPLE)
            throw tpipe::error("tpipe::mpi::progress_thread needs MPI initialised with MPI_THREAD_MULTIPLE (it calls MPI from its own "
                               "thread); use tpipe::mpi::environment or MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
        check(MPI_Comm_dup(MPI_COMM_SELF, &comm_), "MPI_Comm_dup(MPI_COMM_SELF) for the progress thread");
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        thread_ = std::thread([this] { run(); });
    }
    progress_thread(const progress_thread&) = delete;
    progress_thread& operator=(const progress_thread&) = delete;
    ~progress_thread()
    {
        stop_.store(true, std::memory_order_seq_cst);
        detail::outstanding().fetch_add(1, std::memory_order_seq_cst);  // wakes a sleeping thread
        detail::outstanding().notify_all();
        thread_.join();
        detail::outstanding().fetch_sub(1, std::memory_order_seq_cst);
        MPI_Comm_free(&comm_);
    }

    std::chrono::microseconds interval() const noexcept { return interval_; }
    //! MPI_Iprobe calls made so far (to check that the thread runs, and idles when it should).
    std::uint64_t probes() const noexcept { return probes_.load(std::memory_order_relaxed); }

private:
    void run() noexcept
    {
        auto& n = detail::outstanding();
        while (!stop_.load(std::memory_order_acquire)) {
            if (n.load(std::memory_order_acquire) <= 0) {
                n.wait(0, std::memory_order_acquire);
                continue;
            }
            if (!detail::loop_tested().exchange(false, std::memory_order_relaxed)) {
                int flag = 0;
                MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, MPI_STATUS_IGNORE);
                detail::run_progress_hooks();
                probes_.fetch_add(1, std::memory_order_relaxed);
            }
            std::this_thread::sleep_for(interval_);
        }
    }

    std::chrono::microseconds interval_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    std::atomic<bool> stop_{false};
    std::atomic<std::uint64_t> probes_{0};
    std::thread thread_;
};

} // namespace tpipe::mpi
