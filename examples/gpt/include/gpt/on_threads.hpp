#pragma once
// Data-parallel replicas on threads of one process: each replica's step on a thread of its own.
#include <atomic>
#include <cstddef>
#include <exception>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace gpt {

//! Runs fn(k) for k in [0, n) on n threads (inline when n == 1); rethrows the first failure
//! after every thread has ended.
template <class F>
void on_threads(std::size_t n, F&& fn)
{
    if (n == 1) return fn(std::size_t{0});
    std::vector<std::exception_ptr> failed(n);
    std::vector<std::thread> threads;
    // Every thread waits until all have started: the replicas all-reduce together, so one that
    // cannot start would leave the others waiting for it. If one cannot, none runs fn.
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
                }
            });
        gate.store(1);
        gate.notify_all();
    } catch (const std::system_error& e) {  // the threads started already end first, then the error
        gate.store(2);
        gate.notify_all();
        for (auto& t : threads) t.join();
        throw std::runtime_error("could not start thread " + std::to_string(threads.size() + 1) + " of " +
                                 std::to_string(n) + " for the replicas (" + e.what() +
                                 "); the process is at its limit of threads (ulimit -u): use fewer --dp");
    }
    for (auto& t : threads) t.join();
    for (auto& f : failed)
        if (f) std::rethrow_exception(f);
}

} // namespace gpt
