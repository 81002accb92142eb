#pragma once
// tpipe::cuda::peer_runtime: the CUDA runtime's peer copier (tpipe::cuda::peer_copier):
// cudaMemcpyPeerAsync, completion markers from default_event_pool(). The NCCL runtime api takes
// its markers from it too (tpipe/nccl/runtime_api.hpp).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/error_macros.hpp"
#include "tpipe/cuda/peer_channel.hpp"
#include "tpipe/cuda/runtime_driver.hpp"

namespace tpipe::cuda {

//! Completion markers (pooled events: 0 done, 1 not yet, -cudaError_t failed) and peer copies.
struct peer_runtime {
    using stream_t = cudaStream_t;
    struct marker_t {
        cudaEvent_t event = nullptr;
        int gpu = 0;
    };

    int copy_peer(void* dst, int dst_gpu, const void* src, int src_gpu, std::size_t n, stream_t s) noexcept
    {
        const cudaError_t e = cudaMemcpyPeerAsync(dst, dst_gpu, src, src_gpu, n, s);
        if (e != cudaSuccess) (void)cudaGetLastError();
        return e == cudaSuccess ? 0 : -static_cast<int>(e);
    }
    marker_t record(stream_t s)
    {
        marker_t m;
        TPIPE_CUDA_TRY(cudaStreamGetDevice(s, &m.gpu));
        m.event = default_event_pool().acquire(m.gpu);
        if (const cudaError_t e = cudaEventRecord(m.event, s); e != cudaSuccess) {
            default_event_pool().release(m.gpu, m.event);
            TPIPE_CUDA_TRY(e);
        }
        return m;
    }
    int query(marker_t m) noexcept
    {
        const cudaError_t e = runtime_driver::forget_not_ready(cudaEventQuery(m.event));
        if (e == cudaSuccess) return 0;
        if (e == cudaErrorNotReady) return 1;
        (void)cudaGetLastError();
        return -static_cast<int>(e);
    }
    void release(marker_t m) noexcept
    {
        if (m.event) default_event_pool().release(m.gpu, m.event);
    }
    std::string describe_stream(int rc) const
    {
        const auto e = static_cast<cudaError_t>(rc < 0 ? -rc : rc);
        return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    }
};
static_assert(peer_copier<peer_runtime>);

} // namespace tpipe::cuda
