#pragma once
// Engines say where compute runs. An engine owns one loop per device and turns "run this stage
// function on device d" into an awaitable:
//
//   co_await eng.compute(d, [&] { return stage.forward(u, std::move(x)); });
//
// tpipe::cpu_engine runs the function inline on the device's loop thread: the awaitable is
// always ready, so an action costs a function call, not a thread hop.
//
// A CUDA engine satisfies the same concept without changes to stages or schedules: its compute
// awaitable enqueues the function's kernels on the device's compute stream, records a pooled
// timing-disabled event, registers a tpipe::poller with the device's loop (cudaEventQuery), and
// suspends; the loop resumes the coroutine when the event completes (or throws the CUDA error).
#include <concepts>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/channel.hpp"
#include "tpipe/exec/loop.hpp"

namespace tpipe {

namespace detail {
struct probe_fn {
    int operator()() const { return 0; }
};
} // namespace detail

//! An engine: devices(), the loop of each device, and compute(device, fn) as an awaitable that
//! resumes with fn's result.
template <class E>
concept engine = requires(E& e, int device, detail::probe_fn fn) {
    { e.devices() } -> std::convertible_to<int>;
    { e.loop_of(device) } -> std::same_as<loop&>;
    { e.compute(device, fn) } -> awaitable_of<int>;
};

//! CPU threads standing in for devices: one loop thread per device, compute runs inline.
class cpu_engine {
public:
    //! The idle spin cpu_engine uses when none is given. While an iteration runs: long (2 ms)
    //! when every loop can have a core of its own, so that a receive waiting for a neighbour's
    //! compute wakes without a futex round trip; short (50 us) when loops outnumber the
    //! hardware threads, so that idle loops do not steal cores from busy ones. Between
    //! iterations: 50 us, so that back-to-back iterations find their loops awake. Past the
    //! first 20 us a spinning loop yields its core (see loop::options).
    static loop::options default_options(int devices)
    {
        const unsigned hw = std::thread::hardware_concurrency();
        loop::options o;
        o.spin = (hw != 0 && static_cast<unsigned>(devices) <= hw) ? std::chrono::nanoseconds(std::chrono::milliseconds(2))
                                                                    : std::chrono::nanoseconds(std::chrono::microseconds(50));
        o.cold_spin = std::chrono::nanoseconds(std::chrono::microseconds(50));
        return o;
    }

    //! `devices` loop threads with the default idle spin; refuses fewer than 1.
    explicit cpu_engine(int devices) : cpu_engine(devices, default_options(devices)) {}

    //! `devices` loop threads with the given loop options; refuses fewer than 1.
    cpu_engine(int devices, loop::options opts)
    {
        if (devices < 1) throw invalid_argument("cpu_engine needs at least 1 device, got " + std::to_string(devices));
        loops_.reserve(static_cast<std::size_t>(devices));
        for (int d = 0; d < devices; ++d) loops_.push_back(std::make_unique<loop_thread>(opts));
    }

    int devices() const noexcept { return static_cast<int>(loops_.size()); }
    loop& loop_of(int device) { return loops_.at(static_cast<std::size_t>(device))->get(); }

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
    std::vector<std::unique_ptr<loop_thread>> loops_;
};

} // namespace tpipe
