// The device side of the CUDA GPT's kernels: the block-per-row executor over CUB and the
// grid-stride element executor, instantiated for every body of gpt_cuda/kernels.hpp.
#include "gpt_cuda/device_executor.hpp"

#include <cub/block/block_reduce.cuh>
#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include <tpipe/core/error.hpp>
#include <tpipe/cuda/error_macros.hpp>

namespace gpt::cuda {
namespace {

constexpr int row_threads = 128;
constexpr int element_threads = 256;

struct sum_op {
    template <class T>
    __device__ T operator()(const T& a, const T& b) const
    {
        return a + b;
    }
};
struct max_op {
    template <class T>
    __device__ T operator()(const T& a, const T& b) const
    {
        return a > b ? a : b;
    }
};

//! The executor's view of one row inside a block: every thread takes a strided share of the
//! columns, CUB combines the shares, thread 0 broadcasts the result through shared memory.
struct block_row {
    struct storage {
        union {
            typename cub::BlockReduce<float, row_threads>::TempStorage f;
            typename cub::BlockReduce<double, row_threads>::TempStorage d;
        } reduce;
        double broadcast;
    };
    storage& st;

    template <class R, class Op>
    __device__ R combine(R mine, Op op) const
    {
        using reduce_t = cub::BlockReduce<R, row_threads>;
        auto& tmp = *reinterpret_cast<typename reduce_t::TempStorage*>(&st.reduce);
        const R total = reduce_t(tmp).Reduce(mine, op);
        if (threadIdx.x == 0) *reinterpret_cast<R*>(&st.broadcast) = total;
        __syncthreads();
        const R r = *reinterpret_cast<R*>(&st.broadcast);
        __syncthreads();  // the storage is free for the next reduction
        return r;
    }
    template <class F>
    __device__ auto sum(std::int64_t n, F f) const
    {
        using R = decltype(f(0));
        R s = 0;
        for (std::int64_t c = threadIdx.x; c < n; c += row_threads) s += f(c);
        return combine(s, sum_op{});
    }
    template <class F>
    __device__ auto max(std::int64_t n, F f) const
    {
        using R = decltype(f(0));
        R m = -INFINITY;
        for (std::int64_t c = threadIdx.x; c < n; c += row_threads) m = f(c) > m ? f(c) : m;
        return combine(m, max_op{});
    }
    template <class F>
    __device__ void each(std::int64_t n, F f) const
    {
        for (std::int64_t c = threadIdx.x; c < n; c += row_threads) f(c);
        __syncthreads();  // later reductions of the row read what other threads wrote
    }
    template <class F>
    __device__ void once(F f) const
    {
        if (threadIdx.x == 0) f();
        __syncthreads();
    }
};

template <class Body>
__global__ void __launch_bounds__(row_threads) row_kernel(Body body)
{
    __shared__ block_row::storage st;
    block_row row{st};
    body(row, static_cast<std::int64_t>(blockIdx.x));
}

template <class Body>
__global__ void element_kernel(Body body, std::int64_t n)
{
    const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) body(e);
}

} // namespace

template <class Body>
void device_executor::rows(std::int64_t n, std::int64_t /*width*/, const Body& body)
{
    if (n <= 0) return;
    if (n > 0x7fffffff)
        throw tpipe::invalid_argument("gpt::cuda: " + std::to_string(n) + " rows in one launch, at most 2^31 - 1");
    row_kernel<Body><<<static_cast<unsigned>(n), row_threads, 0, stream>>>(body);
    TPIPE_CUDA_TRY(cudaGetLastError());
}

template <class Body>
void device_executor::elements(std::int64_t n, const Body& body)
{
    if (n <= 0) return;
    const std::int64_t blocks = (n + element_threads - 1) / element_threads;
    element_kernel<Body><<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), element_threads, 0, stream>>>(body, n);
    TPIPE_CUDA_TRY(cudaGetLastError());
}

#define GPT_CUDA_ROWS(...) \
    template void device_executor::rows<body::__VA_ARGS__>(std::int64_t, std::int64_t, const body::__VA_ARGS__&);
#define GPT_CUDA_ELEMENTS(...) \
    template void device_executor::elements<body::__VA_ARGS__>(std::int64_t, const body::__VA_ARGS__&);
// Every body in float32 and in bf16 storage (the K/V copy also from the float gradient
// accumulators into bf16 qkv).
#define GPT_CUDA_STORAGE(S)                  \
    GPT_CUDA_ROWS(layernorm_forward<S>)       \
    GPT_CUDA_ROWS(layernorm_backward<S>)      \
    GPT_CUDA_ROWS(causal_softmax_forward<S>)  \
    GPT_CUDA_ROWS(causal_softmax_backward<S>) \
    GPT_CUDA_ROWS(softmax_cross_entropy<S>)   \
    GPT_CUDA_ELEMENTS(bias_gelu_forward<S>)   \
    GPT_CUDA_ELEMENTS(gelu_backward<S>)       \
    GPT_CUDA_ELEMENTS(add_bias_residual<S>)   \
    GPT_CUDA_ELEMENTS(column_sum<S>)          \
    GPT_CUDA_ELEMENTS(layernorm_gain_grad<S>) \
    GPT_CUDA_ELEMENTS(embedding_forward<S>)   \
    GPT_CUDA_ELEMENTS(embedding_backward<S>)  \
    GPT_CUDA_ELEMENTS(kv_cache_copy<S, S>)    \
    GPT_CUDA_ELEMENTS(convert<S>)
GPT_CUDA_STORAGE(float)
GPT_CUDA_STORAGE(__nv_bfloat16)
GPT_CUDA_ELEMENTS(kv_cache_copy<__nv_bfloat16, float>)
GPT_CUDA_ROWS(sum_of_squares)
GPT_CUDA_ROWS(sum_doubles)
GPT_CUDA_ELEMENTS(adamw_update)
#undef GPT_CUDA_STORAGE
#undef GPT_CUDA_ROWS
#undef GPT_CUDA_ELEMENTS

} // namespace gpt::cuda
