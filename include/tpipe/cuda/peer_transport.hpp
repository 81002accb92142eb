#pragma once
// tpipe::cuda::peer_transport<Pool>: basic_peer_transport (tpipe/cuda/basic_peer_transport.hpp)
// over the CUDA runtime (tpipe::cuda::peer_runtime). make_peer_transport takes the placement
// from a tpipe::cuda::engine (GPU and transfer stream of each rank's device).
#include <cuda_runtime_api.h>

#include <utility>
#include <vector>

#include "tpipe/cuda/basic_peer_transport.hpp"
#include "tpipe/cuda/engine.hpp"
#include "tpipe/cuda/memory_pool.hpp"
#include "tpipe/cuda/peer_runtime.hpp"

namespace tpipe::cuda {

template <payload_pool Pool>
using peer_transport = basic_peer_transport<peer_runtime, Pool>;

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
