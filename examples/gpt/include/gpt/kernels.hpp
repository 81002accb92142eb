#pragma once
// CPU kernels of the reference GPT: a blocked, vectorised GEMM and a small thread pool.
// Kernels are templates on the scalar type with explicit instantiations for float and double
// (compiled in src/kernels.cpp, so that only the library needs the target's vector flags).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpt {

//! A fixed set of worker threads; `run(n, fn)` calls fn(0..n-1) across them and the caller.
//! With one thread everything runs inline on the caller.
class thread_pool {
public:
    explicit thread_pool(int threads = 1);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return threads_; }
    //! Runs fn(i) for i in [0, tasks); returns when all are done. Exceptions are rethrown.
    void run(int tasks, const std::function<void(int)>& fn);

private:
    void work_loop();
    void stop_workers();  //!< stops and joins every started worker
    void drain(const std::function<void(int)>* job, int tasks);

    int threads_ = 1;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, done_cv_;
    std::uint64_t generation_ = 0;
    bool stop_ = false;
    const std::function<void(int)>* job_ = nullptr;
    int tasks_ = 0;
    int active_ = 0;
    std::atomic<int> next_{0};
    std::atomic<int> done_{0};
    std::exception_ptr error_;
};

//! A strided matrix view: element (i, j) is data[i * rs + j * cs]. Transposition swaps rs and cs.
template <class T>
struct mat {
    const T* data;
    std::int64_t rs;
    std::int64_t cs;
    mat t() const { return {data, cs, rs}; }
};

//! C[m x n] (+)= A[m x k] * B[k x n]; C rows are ldc apart, columns contiguous.
//! Blocked (packing into cache-sized panels) with a register-tiled vector micro-kernel.
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
          bool accumulate);

//! The same, split across the pool's threads (by rows of C when there are many, else by columns).
template <class T>
void gemm(thread_pool& pool, std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c,
          std::int64_t ldc, bool accumulate);

//! Plain triple loop, for tests of the blocked kernel only.
template <class T>
void gemm_naive(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
                bool accumulate);

} // namespace gpt
