#pragma once
// How a CUDA GPT activation crosses a boundary between GPUs (peer copies inside a process, NCCL
// between processes): tpipe::device_payload_traits (tpipe/transport/device_payload_traits.hpp). Header:
// rows, tokens and bytes; body: the activation's device buffer, sent and received in place.
// The receiving side allocates from an activation_pool (its memory pool, GPU and stream), so a
// steady state makes no driver allocation. The last stage's output is empty: no body.
//
// peer_payload.hpp comes with the peer/NCCL transports (helper N's part of issue 12); until that
// tree is present this header only declares activation_pool.
#include <cstddef>
#include <cstdint>
#include <span>

#include <cuda_runtime_api.h>

#include "gpt_cuda/model.hpp"

namespace gpt::cuda {

//! Where a received activation's body is allocated.
struct activation_pool {
    memory_pool* pool = nullptr;
    int gpu = 0;
    cudaStream_t stream{};
};

} // namespace gpt::cuda

#if __has_include(<tpipe/transport/device_payload_traits.hpp>)
#include <tpipe/transport/device_payload_traits.hpp>

template <>
struct tpipe::device_payload_traits<gpt::cuda::activation> {
    struct header {
        std::int64_t rows, tokens, bytes;
    };
    using pool = gpt::cuda::activation_pool;
    static header header_of(const gpt::cuda::activation& a)
    {
        return {a.rows, a.tokens, a.data ? static_cast<std::int64_t>(a.data.bytes()) : 0};
    }
    static gpt::cuda::activation make(const header& h, gpt::cuda::activation_pool& p)
    {
        gpt::cuda::activation a{h.rows, h.tokens, {}};
        if (h.bytes > 0) a.data = p.pool->allocate(static_cast<std::size_t>(h.bytes), p.gpu, p.stream);
        return a;
    }
    static std::span<const std::byte> device_bytes(const gpt::cuda::activation& a)
    {
        if (!a.data) return {};
        return {static_cast<const std::byte*>(a.data.data()), a.data.bytes()};
    }
    static std::span<std::byte> device_bytes(gpt::cuda::activation& a)
    {
        if (!a.data) return {};
        return {static_cast<std::byte*>(a.data.data()), a.data.bytes()};
    }
};
static_assert(tpipe::device_payload<gpt::cuda::activation, gpt::cuda::activation_pool>);
#endif
