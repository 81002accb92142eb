#pragma once
// tpipe::nccl::device_calls<D>: what tpipe's NCCL code needs of the GPU besides NCCL itself —
// its streams, completion markers and awaitables, envelope buffers and envelope copies — made of
// the CUDA engine's driver seam (tpipe::cuda::driver, tpipe/cuda/driver.hpp). An NCCL api
// (tpipe/nccl/api.hpp) derives from it, so its stream work goes through the same seam, and in
// the CPU tests the same double (tests/cuda/fake_driver.hpp), as the engine's and the peer
// copies'.
//
//   record(s) / query(m) / release(m) / describe_stream(rc)   tpipe::cuda::stream_markers
//   after(s, what, check)        cuda::basic_after: awaited from the loop, check() polled alongside
//   device_alloc(n) / device_free(p), host_alloc(n) / host_free(p)  (pinned host memory)
//   copy_async(dst, src, n, s, context)   cudaMemcpyAsync (cudaMemcpyDefault); throws on failure
//   drain(s, limit)                       waits, polling, until the stream's work has run
//   stream_create() / stream_destroy(s)   a non-blocking stream on the current GPU
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>

#include "tpipe/cuda/basic_after.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/cuda/stream_markers.hpp"

namespace tpipe::nccl {

template <cuda::driver D>
class device_calls : public cuda::stream_markers<D> {
public:
    using typename cuda::stream_markers<D>::stream_t;
    using cuda::stream_markers<D>::stream_markers;

    //! Completes when the work enqueued on `s` so far has; `check` is polled alongside (its
    //! message, or a failure of the work, resumes with cuda_error naming `what`).
    template <class Check>
    cuda::basic_after<D, Check> after(stream_t s, std::string what, Check check)
    {
        return cuda::after_on(this->events(), this->driver(), s, std::move(what), std::move(check));
    }

    void* device_alloc(std::size_t n)
    {
        D& d = this->driver();
        void* p = nullptr;
        cuda::detail::check(d, d.malloc_device(&p, n == 0 ? 1 : n), "cudaMalloc", bytes_for_nccl(n));
        return p;
    }
    void device_free(void* p) noexcept { (void)this->driver().free_device(p); }
    void* host_alloc(std::size_t n)
    {
        D& d = this->driver();
        void* p = nullptr;
        cuda::detail::check(d, d.malloc_host(&p, n == 0 ? 1 : n), "cudaMallocHost", bytes_for_nccl(n));
        return p;
    }
    void host_free(void* p) noexcept { (void)this->driver().free_host(p); }

    //! Enqueues a copy on `s`; throws cuda_error naming `context` if it cannot be enqueued.
    void copy_async(void* dst, const void* src, std::size_t n, stream_t s, const std::string& context)
    {
        D& d = this->driver();
        cuda::detail::check(d, d.memcpy_async(dst, src, n, s), "cudaMemcpyAsync", context);
    }

    //! Waits, polling, until the work enqueued on `s` has completed or failed (true), or `limit`
    //! passed (false): before freeing memory that work may still write.
    bool drain(stream_t s, std::chrono::steady_clock::duration limit) noexcept
    {
        D& d = this->driver();
        const auto start = std::chrono::steady_clock::now();
        for (;;) {
            const int rc = d.stream_query(s);
            if (rc != D::not_ready) {
                if (rc != 0) (void)d.last_error();
                return true;
            }
            if (std::chrono::steady_clock::now() - start >= limit) return false;
            std::this_thread::yield();
        }
    }

    stream_t stream_create()
    {
        D& d = this->driver();
        stream_t s{};
        cuda::detail::check(d, d.stream_create(&s), "cudaStreamCreateWithFlags", "NCCL stream");
        return s;
    }
    void stream_destroy(stream_t s) noexcept { (void)this->driver().stream_destroy(s); }

private:
    static std::string bytes_for_nccl(std::size_t n) { return std::to_string(n) + " bytes for tpipe's NCCL code"; }
};

} // namespace tpipe::nccl
