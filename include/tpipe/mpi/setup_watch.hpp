#pragma once
// tpipe::mpi::detail::setup_*: the bound on the blocking set-up collectives tpipe makes before a
// communicator has a watchdog of its own: the launch agreement (tpipe::mpi::agree, also the
// transport's layout agreement and the runner's agree), making a communicator (MPI_Comm_dup),
// its split, and set_watchdog's own duplicate; and what builds on them (NCCL's unique id over
// MPI, tpipe::nccl::transport's set-up through tpipe::mpi::transport::bounded_setup).
// environment_options::watchdog sets the bound.
//
// Why: a process that stops before the first step (SIGSTOP, a debugger) leaves the others in a
// set-up collective, where no communicator's watchdog looks, and MPI never times out.
//
// How: bounded, each of them is posted nonblocking (MPI_Iallgather, MPI_Comm_idup; MPI_Comm_split
// and NCCL's set-up calls, which have no nonblocking form, run on a thread of their own: setup_run)
// and polled through one stall_watch over a duplicate of MPI_COMM_WORLD that the environment makes
// when it starts. So a process that has waited for the bound names the processes that did not
// arrive and what the others wait in, as a communicator's watchdog does, and throws
// tpipe::watchdog_error (also written to stderr); the environment then ends the job with MPI_Abort.
// Set-up collectives are made from one thread at a time (as MPI requires of a communicator's
// collectives); polls from two threads at once are serialised.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/exec/errors.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/stall_watch.hpp"

namespace tpipe::mpi::detail {

struct setup_watch_state {
    std::mutex m;
    std::unique_ptr<stall_watch> watch;  //!< null: set-up is not bounded
    std::uint64_t waits = 0;             //!< set-up collectives so far (numbers them in the report)
};

//! The process's set-up watch; never destroyed (no MPI call after main returns): the
//! environment resets its watch before MPI_Finalize.
inline setup_watch_state& setup_watch() noexcept
{
    static auto* s = new setup_watch_state;
    return *s;
}

//! Set-up collectives from now on are polled against `bound` (0: not), their notes going over
//! `notes`, a duplicate of MPI_COMM_WORLD that this takes (every process makes one, whatever its
//! bound: the environment, right after MPI_Init, which no library can bound either). The bound
//! also bounds the wait before MPI_Finalize (tpipe::mpi::environment).
inline void bound_setup(MPI_Comm notes, std::chrono::milliseconds bound)
{
    std::lock_guard<std::mutex> g(setup_watch().m);
    setup_watch().watch.reset();
    if (bound.count() <= 0) {
        MPI_Comm_free(&notes);
        return;
    }
    setup_watch().watch = std::make_unique<stall_watch>(notes, bound, process_namer{});
    auto& largest = largest_watchdog_ms();
    for (auto m = largest.load(); bound.count() > m && !largest.compare_exchange_weak(m, bound.count());) {}
}

//! Set-up collectives are no longer bounded (local; before MPI_Finalize).
inline void unbound_setup()
{
    std::lock_guard<std::mutex> g(setup_watch().m);
    setup_watch().watch.reset();
}

//! The buffers of a set-up collective the watchdog abandoned: MPI may still use them, so they
//! live until the process ends, reachable (not reported as a leak).
template <class T>
inline void keep_abandoned(std::unique_ptr<T> buffers)
{
    static auto* kept = new std::vector<void*>;
    kept->push_back(buffers.release());
}

//! Polls `done()` until it is true. Bounded (set-up collective number `seq`, `what`): once it
//! has waited for the bound, throws tpipe::watchdog_error naming the processes that did not
//! arrive (the wait is abandoned; the job ends).
template <class Done>
inline void setup_poll(std::uint64_t seq, const char* what, Done&& done)
{
    auto& s = setup_watch();
    const auto since = watch_clock::now();
    for (int polls = 0;; ++polls) {
        if (done()) return;
        std::string report;
        {
            std::lock_guard<std::mutex> g(s.m);
            if (s.watch) report = s.watch->poll(what, seq, since);
        }
        if (!report.empty()) {
            member_stalled().store(true, std::memory_order_relaxed);  // MPI_Finalize would wait for it
            std::fprintf(stderr, "%s\n", report.c_str());
            std::fflush(stderr);
            throw watchdog_error(report);
        }
        // Set-up waits are few: spin briefly for the fast case, then leave the core to others.
        if (polls < 1000) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
}

//! The number of the next bounded set-up collective, or 0 when set-up is not bounded.
inline std::uint64_t next_setup_wait()
{
    auto& s = setup_watch();
    std::lock_guard<std::mutex> g(s.m);
    return s.watch ? ++s.waits : 0;
}

//! Waits for `req`, the set-up collective `what`. Bounded: polls it, and once it has waited for
//! the bound throws tpipe::watchdog_error naming the processes that did not arrive; the request
//! is then abandoned (the caller leaves its buffers to MPI; the job ends).
inline void setup_wait(MPI_Request& req, const char* what)
{
    const std::uint64_t seq = next_setup_wait();
    if (seq == 0) {
        check(MPI_Wait(&req, MPI_STATUS_IGNORE), what);
        return;
    }
    setup_poll(seq, what, [&] {
        int done = 0;
        check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
        return done != 0;
    });
}

//! Whether set-up collectives are bounded now.
inline bool setup_bounded()
{
    std::lock_guard<std::mutex> g(setup_watch().m);
    return setup_watch().watch != nullptr;
}

// Unbounded, communicators are made as before the bound existed: MPI_Comm_dup, and no barrier
// before a split. (A CI run of the MPI suite at np 4 under ASan and load hung once, silently,
// with MPI_Comm_idup waited for by MPI_Wait in their place; not reproduced in 23 runs since, and
// the blocking calls had passed CI for weeks. Open MPI's communicator-id allocation has a history
// of hangs under MPI_THREAD_MULTIPLE.) Bounded, they are nonblocking and polled. A nonblocking
// collective need not match a blocking one, so every process must be given the same bound: one
// given a bound among processes without ends the job at its bound, naming where it waits.

//! MPI_Comm_dup of `parent` (collective over it), bounded as a set-up collective.
inline MPI_Comm setup_dup(MPI_Comm parent, const char* what)
{
    if (!setup_bounded()) {
        MPI_Comm out = MPI_COMM_NULL;
        check(MPI_Comm_dup(parent, &out), what);
        return out;
    }
    // MPI writes the handle when the duplicate completes: abandoned, it must stay valid.
    auto out = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Comm_idup(parent, out.get(), &req), what);
    try {
        setup_wait(req, what);
    } catch (const watchdog_error&) {
        keep_abandoned(std::move(out));
        throw;
    }
    return *out;
}

//! Blocking set-up calls running on their threads now (setup_run), abandoned ones included: a
//! test that lets an abandoned one complete waits for this to be 0 before it frees what it used.
inline std::atomic<int>& setup_calls_running() noexcept
{
    static std::atomic<int> n{0};
    return n;
}

//! Runs `call()`, a blocking set-up step that every process makes together and that has no
//! nonblocking form (MPI_Comm_split, ncclCommInitRank), and returns its result (its exception
//! propagates). Bounded, it runs on a thread of its own while this one polls it against the
//! bound: a member that stops anywhere in it, even after the exchanges began, is named, and the
//! thread is left blocked in the call (the job ends), so `call` must own what it uses (capture
//! by value). An MPI_Ibarrier before it would not do: a member stopped after the barrier, inside
//! the call, hangs the others (tests/mpi/crash.cpp, stop_inside_split).
template <class Call>
inline std::invoke_result_t<Call&> setup_run(const char* what, Call call)
{
    using result = std::invoke_result_t<Call&>;
    const std::uint64_t seq = next_setup_wait();
    if (seq == 0) return call();
    struct state {
        std::atomic<bool> done{false};
        std::optional<std::conditional_t<std::is_void_v<result>, bool, result>> value;
        std::exception_ptr error;
    };
    auto st = std::make_shared<state>();  // shared with the thread, which may outlive this wait
    setup_calls_running().fetch_add(1);
    std::thread t;
    try {
        t = std::thread([st, call = std::move(call)]() mutable {
            try {
                if constexpr (std::is_void_v<result>) {
                    call();
                    st->value.emplace(true);
                } else {
                    st->value.emplace(call());
                }
            } catch (...) {
                st->error = std::current_exception();
            }
            st->done.store(true, std::memory_order_release);
            setup_calls_running().fetch_sub(1);
        });
    } catch (...) {
        setup_calls_running().fetch_sub(1);
        throw;
    }
    try {
        setup_poll(seq, what, [&] { return st->done.load(std::memory_order_acquire); });
    } catch (...) {
        t.detach();
        throw;
    }
    t.join();
    if (st->error) std::rethrow_exception(st->error);
    if constexpr (!std::is_void_v<result>) return std::move(*st->value);
}

//! The communicator that `make(&out)` makes (it returns MPI's error code): setup_run of a
//! blocking MPI set-up collective (MPI_Comm_split, MPI_Comm_split_type).
template <class Make>
inline MPI_Comm setup_make(const char* what, Make make)
{
    const auto [rc, out] = setup_run(what, [make = std::move(make)]() mutable {
        MPI_Comm c = MPI_COMM_NULL;
        const int r = make(&c);
        return std::pair{r, c};
    });
    check(rc, what);
    return out;
}

} // namespace tpipe::mpi::detail

namespace tpipe::mpi {

//! The environment's set-up bound as an object, for a library call that takes one
//! (tpipe::nccl::communicator::init(api, n, id, rank, tpipe::mpi::setup_bound{})): its blocking
//! set-up call runs under the bound (detail::setup_run), unbounded where the environment has none.
struct setup_bound {
    template <class Call>
    auto bounded_setup(const char* what, Call call) const
    {
        return detail::setup_run(what, std::move(call));
    }
};

} // namespace tpipe::mpi
