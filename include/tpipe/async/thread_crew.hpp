#pragma once
// on_threads for work repeated many times (a training step per call): n members that run fn(k)
// side by side on every call, on threads started once. Starting n threads per call cost 0.1-0.9 ms
// per step on a 2-vCPU VM, as much as a small model's whole step.
//
//   tpipe::thread_crew crew(replicas);
//   for (...) crew.run([&](std::size_t d) { step_replica(d); });
//
// The calling thread is member 0; members 1..n-1 wait on a generation counter between calls.
// Like on_threads, every member runs on its own thread (members may meet in a collective), and a
// failure is rethrown after every member of that call has returned.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe {

class thread_crew {
public:
    //! Starts n - 1 threads; refuses n < 1, and names the limit when a thread cannot start.
    explicit thread_crew(std::size_t n) : failed_(n)
    {
        detail::require(n >= 1, "thread_crew: needs at least 1 member, got 0");
        try {
            for (std::size_t k = 1; k < n; ++k) threads_.emplace_back([this, k] { serve(k); });
        } catch (const std::system_error& e) {
            const auto started = threads_.size();
            stop();
            throw error("could not start thread " + std::to_string(started + 2) + " of " + std::to_string(n) +
                        " for members that run together (" + e.what() +
                        "); the process is at its limit of threads (ulimit -u): run fewer replicas or stages here");
        }
    }
    thread_crew(const thread_crew&) = delete;
    thread_crew& operator=(const thread_crew&) = delete;
    ~thread_crew() { stop(); }

    std::size_t size() const noexcept { return failed_.size(); }

    //! fn(k) for every member k, side by side; returns when all have returned, rethrowing the
    //! first failure (by member).
    template <class F>
    void run(F&& fn)
    {
        work_ = [&fn](std::size_t k) { fn(k); };
        pending_.store(static_cast<int>(threads_.size()), std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        attempt(0);
        for (int left = pending_.load(std::memory_order_acquire); left != 0; left = pending_.load(std::memory_order_acquire))
            pending_.wait(left, std::memory_order_acquire);
        work_ = nullptr;
        for (auto& f : failed_)
            if (f) std::rethrow_exception(std::exchange(f, nullptr));
    }

private:
    void attempt(std::size_t k) noexcept
    {
        try {
            work_(k);
        } catch (...) {
            failed_[k] = std::current_exception();
        }
    }

    void serve(std::size_t k)
    {
        std::uint64_t seen = 0;
        for (;;) {
            generation_.wait(seen, std::memory_order_acquire);
            seen = generation_.load(std::memory_order_acquire);
            if (stopping_.load(std::memory_order_acquire)) return;
            attempt(k);
            if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
        }
    }

    void stop() noexcept
    {
        stopping_.store(true, std::memory_order_release);
        generation_.fetch_add(1, std::memory_order_release);
        generation_.notify_all();
        for (auto& t : threads_) t.join();
        threads_.clear();
    }

    std::vector<std::exception_ptr> failed_;
    std::function<void(std::size_t)> work_;
    std::atomic<std::uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    std::atomic<bool> stopping_{false};
    std::vector<std::thread> threads_;
};

} // namespace tpipe
