#pragma once
// tpipe::cuda::basic_peer_transport<Copier, Pool>: the transport of a pipeline whose ranks all run
// in this process on GPUs (tpipe::cuda::engine), a tpipe::link_transport. A boundary between two
// GPUs gets a peer link (tpipe/cuda/peer_link.hpp: cudaMemcpyPeerAsync on the receiver's transfer
// stream) under the one typed channel, tpipe::linked_channel; a boundary between two ranks of one
// GPU gets none, so its payload moves (a local channel). It opens no link to another process.
// tpipe::cuda::peer_transport (tpipe/cuda/peer_transport.hpp) is it over the CUDA runtime. Joined
// with NCCL between processes by tpipe::composed_transport (tpipe/transport/composed_transport.hpp).
//
//   tpipe::cuda::engine eng({.gpu_of_device = {0, 1}});
//   auto x = tpipe::cuda::make_peer_transport(eng, {0, 1}, {&pool0, &pool1});  // rank r on device r
//   tpipe::runner r(pipe, prog, eng, x, {.device_of_rank = {0, 1}});            // tpipe::runner<Pipe, E>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/cuda/peer_link.hpp"
#include "tpipe/transport/link_transport.hpp"

namespace tpipe::cuda {

template <peer_copier Copier, payload_pool Pool>
class basic_peer_transport final : public all_here {
public:
    using stream_t = typename Copier::stream_t;

    //! Rank r runs on GPU gpu_of_rank[r], receives on transfer_stream_of_rank[r] into payloads
    //! made from *pool_of_rank[r] (which allocates on that GPU).
    basic_peer_transport(Copier c, std::vector<int> gpu_of_rank, std::vector<stream_t> transfer_stream_of_rank,
                         std::vector<Pool*> pool_of_rank)
        : copier_(std::move(c)), gpu_(std::move(gpu_of_rank)), stream_(std::move(transfer_stream_of_rank)), pool_(std::move(pool_of_rank))
    {
        if (gpu_.size() != stream_.size() || gpu_.size() != pool_.size())
            throw invalid_argument("peer_transport: " + std::to_string(gpu_.size()) + " GPUs, " + std::to_string(stream_.size()) +
                                   " transfer streams and " + std::to_string(pool_.size()) + " pools; give one of each per pipeline rank");
        for (Pool* p : pool_)
            if (!p) throw invalid_argument("peer_transport: a pool is null; give every pipeline rank the pool of its GPU");
    }

    //! A peer link between the ranks' GPUs, or none (the payload moves) when they share one.
    std::unique_ptr<link> open_within(const endpoint& e) override
    {
        const auto n = static_cast<int>(gpu_.size());
        if (e.from_rank < 0 || e.from_rank >= n || e.to_rank < 0 || e.to_rank >= n)
            throw invalid_argument("peer_transport: boundary " + std::to_string(e.boundary) + " joins ranks " + std::to_string(e.from_rank) +
                                   " and " + std::to_string(e.to_rank) + ", but GPUs are given for ranks 0.." + std::to_string(n - 1));
        const auto from = static_cast<std::size_t>(e.from_rank), to = static_cast<std::size_t>(e.to_rank);
        if (gpu_[from] == gpu_[to]) return nullptr;
        return std::make_unique<basic_peer_link<Copier>>(copier_, gpu_[from], gpu_[to], stream_[to], device_pool_ref(*pool_[to]));
    }

private:
    Copier copier_;
    std::vector<int> gpu_;
    std::vector<stream_t> stream_;
    std::vector<Pool*> pool_;
};

} // namespace tpipe::cuda
