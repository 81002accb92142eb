#pragma once
// The CUDA runtime's peer copier (tpipe::cuda::peer_copier) and tpipe::cuda::peer_transport:
// cudaMemcpyPeerAsync, completion markers from default_event_pool(). make_peer_transport takes
// the placement from a tpipe::cuda::engine (GPU and transfer stream of each rank's device).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <vector>

#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/engine.hpp"
#include "tpipe/cuda/error.hpp"
#include "tpipe/cuda/peer_transport.hpp"

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

template <payload_pool Pool>
using peer_transport = basic_peer_transport<peer_runtime, Pool>;
static_assert(tpipe::transport<peer_transport<memory_pool>> && !tpipe::transport_for<peer_transport<memory_pool>, int>);
static_assert(tpipe::enable_local_connecting_transport<peer_transport<memory_pool>>);

//! Rank r on engine device device_of_rank[r]: its GPU and its transfer stream come from `eng`;
//! its payloads from *pool_of_rank[r].
template <payload_pool Pool>
peer_transport<Pool> make_peer_transport(const engine& eng, const std::vector<int>& device_of_rank, std::vector<Pool*> pool_of_rank)
{
    std::vector<int> gpus;
    std::vector<cudaStream_t> streams;
    for (int d : device_of_rank) {
        gpus.push_back(eng.gpu_of(d));
        streams.push_back(eng.transfer_stream(d));
    }
    return peer_transport<Pool>(peer_runtime{}, std::move(gpus), std::move(streams), std::move(pool_of_rank));
}

} // namespace tpipe::cuda
