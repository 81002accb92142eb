#pragma once
// Engines say where compute runs. An engine owns one loop per device and turns "run this stage
// function on device d" into an awaitable:
//
//   co_await eng.compute(d, [&] { return stage.forward(u, std::move(x)); });
//
// tpipe::cpu_engine runs the function inline on the device's loop thread: the awaitable is
// always ready, so an action costs a function call, not a thread hop.
//
// tpipe::cuda::engine (tpipe/cuda/engine.hpp) satisfies the same concept without changes to
// stages or schedules: its compute awaitable enqueues the function's kernels on the device's
// compute stream, records a pooled timing-disabled event, registers a tpipe::poller with the
// device's loop (cudaEventQuery), and suspends; the loop resumes the coroutine when the event
// completes (or throws the CUDA error).
#include <algorithm>
#include <concepts>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/async/loop.hpp"

namespace tpipe {

namespace detail {
struct probe_fn {
    int operator()() const { return 0; }
};
} // namespace detail

//! An engine: devices(), the loop of each device, and compute(device, fn) as an awaitable that
//! resumes with fn's result.
//!
//! Optional capabilities, which an engine declares explicitly (an engine whose computes wait for
//! something outside the loop, such as a GPU stream, needs them so that a failed or stuck
//! iteration ends instead of hanging): tpipe::cancellable_engine (reset(std::stop_token),
//! tpipe/exec/cancellable_engine.hpp) and tpipe::reporting_engine (waiting_for, for the
//! watchdog's report, tpipe/exec/reporting_engine.hpp). cpu_engine declares neither: its
//! computes never wait.
template <class E>
concept engine = requires(E& e, int device, detail::probe_fn fn) {
    { e.devices() } -> std::convertible_to<int>;
    { e.loop_of(device) } -> std::same_as<loop&>;
    { e.compute(device, fn) } -> awaitable_of<int>;
};

//! How cpu_engine drives its devices.
struct cpu_engine_options {
    //! Loop threads; 0: one per device, at most std::thread::hardware_concurrency(). Ranks on
    //! one loop run one compute at a time: a stage whose compute blocks on another process's or
    //! pipeline's rank (a tensor-parallel sum) needs a loop of its own, threads = devices.
    int threads = 0;
    //! The loops' idle spin; empty: cpu_engine::default_loop_options(threads).
    std::optional<loop::options> idle{};
};

//! CPU threads standing in for devices. Each device's work runs on a loop thread; compute runs
//! inline. There are never more loop threads than hardware threads unless asked for: devices
//! beyond that share loops in contiguous blocks (device d on thread d * threads / devices), so
//! neighbouring pipeline ranks hand off within one thread and only block edges cross threads.
//! More spinning loops than cores would turn every hand-off into a sleep and a wake-up.
class cpu_engine {
public:
    using options = cpu_engine_options;

    //! The idle spin cpu_engine uses when none is given. While an iteration runs: long (2 ms)
    //! when every loop can have a core of its own, so that a receive waiting for a neighbour's
    //! compute wakes without a futex round trip; none when loops outnumber the hardware
    //! threads: an idle loop then sleeps at once and gives its core to a loop that has work
    //! (measured: 0.4-1 us per action instead of 1.5-2.1 us with a 50 us spin, 8 loops on 2
    //! cores). Between iterations: 50 us, so that back-to-back iterations find their loops
    //! awake. Past the first 20 us a spinning loop yields its core (see loop::options).
    static loop::options default_loop_options(int threads)
    {
        const unsigned hw = std::thread::hardware_concurrency();
        loop::options o;
        o.spin = (hw != 0 && static_cast<unsigned>(threads) <= hw) ? std::chrono::nanoseconds(std::chrono::milliseconds(2))
                                                                    : std::chrono::nanoseconds(0);
        o.cold_spin = std::chrono::nanoseconds(std::chrono::microseconds(50));
        return o;
    }

    //! The loop threads cpu_engine starts for `devices` devices when options::threads is 0.
    static int default_threads(int devices)
    {
        const unsigned hw = std::thread::hardware_concurrency();
        return hw == 0 ? devices : std::min(devices, static_cast<int>(hw));
    }

    //! `devices` devices on options::threads loop threads; refuses fewer than 1 device and a
    //! thread count outside [0, devices].
    explicit cpu_engine(int devices, options o = {}) : devices_(devices)
    {
        if (devices < 1) throw invalid_argument("cpu_engine needs at least 1 device, got " + std::to_string(devices));
        if (o.threads < 0 || o.threads > devices)
            throw invalid_argument("cpu_engine: threads must be in [1, " + std::to_string(devices) +
                                   "] (at most one per device) or 0 for the default, got " + std::to_string(o.threads));
        const int threads = o.threads == 0 ? default_threads(devices) : o.threads;
        const loop::options idle = o.idle ? *o.idle : default_loop_options(threads);
        loops_.reserve(static_cast<std::size_t>(threads));
        // A thread that cannot start (RLIMIT_NPROC, memory for its stack) is an error, not
        // std::terminate: the loops started already stop and join as loops_ unwinds.
        for (int t = 0; t < threads; ++t) {
            try {
                loops_.push_back(std::make_unique<loop_thread>(idle));
            } catch (const std::system_error& e) {
                throw error("cpu_engine: could not start loop thread " + std::to_string(t + 1) + " of " +
                            std::to_string(threads) + " (" + e.what() + "); the process is at its limit of threads "
                            "or memory (ulimit -u, ulimit -v): use fewer devices or threads");
            }
        }
    }

    int devices() const noexcept { return devices_; }
    int threads() const noexcept { return static_cast<int>(loops_.size()); }
    //! The thread that drives `device`.
    int thread_of(int device) const
    {
        if (device < 0 || device >= devices_)
            throw invalid_argument("cpu_engine: device " + std::to_string(device) + " is outside [0, " +
                                   std::to_string(devices_) + ")");
        return static_cast<int>(static_cast<long long>(device) * threads() / devices_);
    }
    loop& loop_of(int device) { return loops_[static_cast<std::size_t>(thread_of(device))]->get(); }

    template <class F>
    struct inline_compute {
        F fn;
        bool await_ready() const noexcept { return true; }
        void await_suspend(std::coroutine_handle<>) const noexcept {}
        decltype(auto) await_resume() { return fn(); }
    };

    //! Runs fn inline when awaited (on the awaiting coroutine's thread: the device's loop).
    template <std::invocable F>
    inline_compute<F> compute(int /*device*/, F&& fn)
    {
        return inline_compute<F>{std::forward<F>(fn)};
    }

private:
    int devices_ = 0;
    std::vector<std::unique_ptr<loop_thread>> loops_;
};

static_assert(engine<cpu_engine>);

} // namespace tpipe
