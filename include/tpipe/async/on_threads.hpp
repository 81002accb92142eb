#pragma once
// Side-by-side work on threads of one process, for members that must all run together (replicas
// that all-reduce, a pipeline's processes on threads): fn(k) for k in [0, n), one thread each.
#include <atomic>
#include <cstddef>
#include <exception>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe {

//! Runs fn(k) for k in [0, n) on n threads (inline when n == 1) and rethrows the first failure
//! in time after every thread has ended. Every thread waits until all have started: members that
//! meet in a collective would wait forever for one that could not start, so if one cannot, none
//! runs fn and a tpipe::error names the thread and the limit (ulimit -u) instead of
//! std::terminate. `cancel` runs once, on the thread of the first failure, as soon as it fails:
//! it releases the members that wait for the failed one in a collective (thread_group::cancel),
//! whose own failures then are not the one rethrown.
template <class F, class C>
void on_threads(std::size_t n, F&& fn, C&& cancel)
{
    if (n == 1) return fn(std::size_t{0});
    std::vector<std::exception_ptr> failed(n);
    std::atomic<int> first{-1};  // the member that failed first
    std::vector<std::thread> threads;
    std::atomic<int> gate{0};  // 0: starting, 1: run, 2: a thread could not start
    try {
        for (std::size_t k = 0; k < n; ++k)
            threads.emplace_back([&, k] {
                gate.wait(0);
                if (gate.load() != 1) return;
                try {
                    fn(k);
                } catch (...) {
                    failed[k] = std::current_exception();
                    int none = -1;
                    if (first.compare_exchange_strong(none, static_cast<int>(k))) cancel();
                }
            });
        gate.store(1);
        gate.notify_all();
    } catch (const std::system_error& e) {  // the threads started already end first, then the error
        gate.store(2);
        gate.notify_all();
        for (auto& t : threads) t.join();
        throw error("could not start thread " + std::to_string(threads.size() + 1) + " of " + std::to_string(n) +
                    " for members that run together (" + e.what() +
                    "); the process is at its limit of threads (ulimit -u): run fewer replicas or stages here");
    }
    for (auto& t : threads) t.join();
    if (first.load() >= 0) std::rethrow_exception(failed[static_cast<std::size_t>(first.load())]);
}

//! on_threads(n, fn) for members that need no cancelling.
template <class F>
void on_threads(std::size_t n, F&& fn)
{
    on_threads(n, std::forward<F>(fn), [] {});
}

} // namespace tpipe
