#pragma once
// A float pipeline on the GPU for the [cuda] tests and the benchmark: each stage is y = a x + b
// on n elements (kernels of stage_kernels.cu), backward dx = a g with per-element weight
// gradients, payloads in device buffers of the engine's memory pool. Values are small
// integers, so every schedule's sums are exact and equal the sequential run's bitwise.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "stage_kernels.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/cuda/current.hpp"
#include "tpipe/cuda/error_macros.hpp"
#include "tpipe/cuda/memory_pool.hpp"

namespace gpu {

//! A payload: n floats in a pool block, written on the producing stage's stream.
struct tensor {
    tpipe::cuda::device_buffer buf;
    int n = 0;
    float* data() const { return buf.data_as<float>(); }
};

inline tensor make_tensor(tpipe::cuda::memory_pool& pool, int n)
{
    return tensor{pool.allocate(static_cast<std::size_t>(n) * sizeof(float), tpipe::cuda::current_device(),
                                tpipe::cuda::current_stream()),
                  n};
}

//! A payload made on another stage's stream is read on this one: its reuse must wait for both.
inline void read_here(tensor& t) { t.buf.use_on(tpipe::cuda::current_stream()); }

struct stage {
    using input = tensor;
    using output = tensor;
    stage(tpipe::cuda::memory_pool& p, float a_, float b_, int n_) : pool(&p), a(a_), b(b_), n(n_) {}

    tpipe::cuda::memory_pool* pool;
    float a, b;
    int n;
    int fail_microbatch = -1;  //!< forward of this microbatch launches with an invalid configuration
    float* da = nullptr;       //!< weight gradients, n each (cudaMalloc'ed by the test)
    float* db = nullptr;
    std::vector<std::pair<int, tensor>> saved;  //!< inputs kept for backward, by microbatch

    tensor forward(const tpipe::unit& u, tensor x)
    {
        read_here(x);
        tensor y = make_tensor(*pool, n);
        if (u.microbatch == fail_microbatch) kernels::invalid_launch(tpipe::cuda::current_stream());
        kernels::affine(x.data(), y.data(), n, a, b, tpipe::cuda::current_stream());
        saved.emplace_back(u.microbatch, std::move(x));
        return y;
    }
    tensor backward(const tpipe::unit& u, tensor g)
    {
        read_here(g);
        auto it = saved.begin();
        while (it->first != u.microbatch) ++it;
        tensor dx = make_tensor(*pool, n);
        kernels::affine_backward(it->second.data(), g.data(), dx.data(), da, db, n, a, tpipe::cuda::current_stream());
        saved.erase(it);  // the input's block is reused by this stream (in order) or after its event
        return dx;
    }
};

//! Host values of the first stage's input of a unit (small integers).
inline std::vector<float> source_values(const tpipe::unit& u, int n)
{
    std::vector<float> v(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>((u.microbatch * 7 + i) % 11 - 5);
    return v;
}

inline std::vector<float> to_host(const float* d, int n)
{
    std::vector<float> h(static_cast<std::size_t>(n));
    TPIPE_CUDA_TRY(cudaMemcpy(h.data(), d, static_cast<std::size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}

} // namespace gpu
