#pragma once
// tpipe::cuda::basic_peer_transport<Copier, Pool>: the transport of a pipeline whose ranks all run
// in this process on GPUs (tpipe::cuda::engine): every boundary gets a peer channel
// (tpipe/cuda/peer_channel.hpp) through connect_local (it is a tpipe::local_connecting_transport),
// which moves the payload between ranks on one GPU and copies it (cudaMemcpyPeerAsync on the
// receiver's transfer stream) between GPUs. It makes no channel to another process.
// tpipe::cuda::peer_transport (tpipe/cuda/peer_transport.hpp) is it over the CUDA runtime. Joined
// with NCCL between processes by tpipe::composed_transport (tpipe/transport/composed_transport.hpp).
//
//   tpipe::cuda::engine eng({.gpu_of_device = {0, 1}});
//   auto x = tpipe::cuda::make_peer_transport(eng, {0, 1}, {&pool0, &pool1});  // rank r on device r
//   tpipe::runner r(pipe, prog, eng, x, {.device_of_rank = {0, 1}});
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/peer_channel.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/transport/local_connecting_transport.hpp"
#include "tpipe/transport/transport.hpp"

namespace tpipe::cuda {

template <peer_copier Copier, payload_pool Pool>
class basic_peer_transport {
public:
    //! Carries payloads with a device form; the runner refuses a boundary of any other type.
    template <class T>
        requires device_payload<T, Pool>
    using channel_type = basic_peer_channel<T, Copier, Pool>;
    //! Every boundary is inside this process and gets its channel from connect_local.
    static constexpr bool tpipe_local_connecting_transport = true;
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

    bool runs(int) const noexcept { return true; }
    //! The channel of a boundary whose two ranks run here (tpipe/transport/local_connecting_transport.hpp).
    template <class T>
        requires device_payload<T, Pool>
    std::unique_ptr<channel_type<T>> connect_local(const endpoint& e)
    {
        const auto n = static_cast<int>(gpu_.size());
        if (e.from_rank < 0 || e.from_rank >= n || e.to_rank < 0 || e.to_rank >= n)
            throw invalid_argument("peer_transport: boundary " + std::to_string(e.boundary) + " joins ranks " + std::to_string(e.from_rank) +
                                   " and " + std::to_string(e.to_rank) + ", but GPUs are given for ranks 0.." + std::to_string(n - 1));
        const auto to = static_cast<std::size_t>(e.to_rank);
        return std::make_unique<channel_type<T>>(copier_, gpu_[static_cast<std::size_t>(e.from_rank)], gpu_[to], stream_[to], *pool_[to],
                                                 e.tags);
    }
    void agree(const std::string&) const noexcept {}
    void fail(const std::string&) const noexcept {}
    std::optional<std::string> failure() const noexcept { return std::nullopt; }
    std::string where(int) const { return {}; }

private:
    Copier copier_;
    std::vector<int> gpu_;
    std::vector<stream_t> stream_;
    std::vector<Pool*> pool_;
};

} // namespace tpipe::cuda
