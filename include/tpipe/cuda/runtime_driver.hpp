#pragma once
// The real driver (tpipe::cuda::driver over the CUDA runtime). Stateless: one process-wide
// instance, runtime_driver::instance().
#include <cuda_runtime_api.h>

#include <cstddef>

#include "tpipe/cuda/driver.hpp"

namespace tpipe::cuda {

struct runtime_driver {
    using stream_type = cudaStream_t;
    using event_type = cudaEvent_t;
    static constexpr int not_ready = static_cast<int>(cudaErrorNotReady);

    //! cudaErrorNotReady is "not yet", not an error, yet the runtime also records it as this
    //! thread's last error: left there, the next cudaGetLastError (the engine's launch check after
    //! a compute, a kernel's TPIPE_CUDA_TRY(cudaGetLastError())) would report it as a failed launch.
    //! Cleared only when it is the recorded one (peek), so a real earlier error is not lost.
    static cudaError_t forget_not_ready(cudaError_t e) noexcept
    {
        if (e == cudaErrorNotReady && cudaPeekAtLastError() == cudaErrorNotReady) (void)cudaGetLastError();
        return e;
    }

    static runtime_driver& instance() noexcept
    {
        static runtime_driver d;
        return d;
    }

    int set_device(int gpu) noexcept { return cudaSetDevice(gpu); }
    int get_device(int* gpu) noexcept { return cudaGetDevice(gpu); }
    int device_count(int* n) noexcept { return cudaGetDeviceCount(n); }
    int stream_create(cudaStream_t* s) noexcept { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
    int stream_destroy(cudaStream_t s) noexcept { return cudaStreamDestroy(s); }
    int stream_device(cudaStream_t s, int* gpu) noexcept { return cudaStreamGetDevice(s, gpu); }
    int stream_query(cudaStream_t s) noexcept { return forget_not_ready(cudaStreamQuery(s)); }
    int event_create(cudaEvent_t* e) noexcept { return cudaEventCreateWithFlags(e, cudaEventDisableTiming); }
    int event_destroy(cudaEvent_t e) noexcept { return cudaEventDestroy(e); }
    int event_record(cudaEvent_t e, cudaStream_t s) noexcept { return cudaEventRecord(e, s); }
    int event_query(cudaEvent_t e) noexcept { return forget_not_ready(cudaEventQuery(e)); }
    int launch_host_func(cudaStream_t s, void (*fn)(void*), void* data) noexcept { return cudaLaunchHostFunc(s, fn, data); }
    int last_error() noexcept { return cudaGetLastError(); }
    int malloc_device(void** p, std::size_t n) noexcept { return cudaMalloc(p, n); }
    int free_device(void* p) noexcept { return cudaFree(p); }
    int malloc_host(void** p, std::size_t n) noexcept { return cudaMallocHost(p, n); }
    int free_host(void* p) noexcept { return cudaFreeHost(p); }
    int memcpy_peer_async(void* dst, int dst_gpu, const void* src, int src_gpu, std::size_t n, cudaStream_t s) noexcept
    {
        return cudaMemcpyPeerAsync(dst, dst_gpu, src, src_gpu, n, s);
    }
    int memcpy_async(void* dst, const void* src, std::size_t n, cudaStream_t s) noexcept
    {
        return cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
    }
    const char* error_name(int e) const noexcept { return cudaGetErrorName(static_cast<cudaError_t>(e)); }
    const char* error_string(int e) const noexcept { return cudaGetErrorString(static_cast<cudaError_t>(e)); }
};
static_assert(driver<runtime_driver>);

} // namespace tpipe::cuda
