#pragma once
// Data-parallel replicas on threads of one process: each replica's step on a thread of its own.
#include <cstddef>
#include <exception>
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
    for (std::size_t k = 0; k < n; ++k)
        threads.emplace_back([&, k] {
            try {
                fn(k);
            } catch (...) {
                failed[k] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& f : failed)
        if (f) std::rethrow_exception(f);
}

} // namespace gpt
