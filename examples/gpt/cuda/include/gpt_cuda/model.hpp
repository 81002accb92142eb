#pragma once
// The reference GPT on CUDA: gpt::part's semantics (examples/gpt/include/gpt/model.hpp) with
// parameters, gradients, activations and K/V caches in device memory, float32.
//
// The same parameter layout (gpt::layout, one flat vector), the same unit of work (a tpipe::unit:
// rows of a microbatch and a token slice of them), the same per-microbatch K/V cache (a slice
// attends to the cached keys of earlier tokens of its rows, causally), backward in reverse token
// order with K/V gradient accumulators, split backward (backward_input / backward_weight), tied or
// untied head, and the loss as a sum of per-unit partial sums divided by B*L. Matrix products on
// cuBLAS, the rest on the kernels of gpt_cuda/kernels.hpp; every buffer comes from a
// tpipe::cuda::memory_pool, so a steady-state iteration makes no driver allocation.
//
// Work is enqueued on the part's stream (set_stream; gpt::cuda::stage sets it to the engine's
// cuda::current_stream() before every call). Only loss() and parameters::download wait for it.
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include <tpipe/core/unit.hpp>
#include <tpipe/cuda/memory_pool.hpp>

#include "gpt/model.hpp"
#include "gpt_cuda/blas.hpp"
#include "gpt_cuda/device_executor.hpp"

namespace gpt::cuda {

using tpipe::cuda::device_buffer;
using tpipe::cuda::memory_pool;

//! A view of `count` elements of a buffer as a tensor of shape `s` (capacity from the buffer).
template <class T>
tensor<T> view_of(const device_buffer& b, shape s, std::int64_t offset = 0)
{
    return {b.data_as<T>() + offset, s, static_cast<std::int64_t>(b.bytes() / sizeof(T)) - offset, memory::device};
}

//! The model's parameter values and gradients on one GPU, in the CPU model's flat layout.
class parameters {
public:
    //! Copies `host`'s values to `gpu` (the stream's device); gradients start at zero.
    parameters(const gpt::parameters<float>& host, memory_pool& pool, int gpu, cudaStream_t stream);

    void upload(const gpt::parameters<float>& host, cudaStream_t stream);
    //! Copies values and gradients into `host` (waits for `stream`).
    void download(gpt::parameters<float>& host, cudaStream_t stream) const;
    void zero_grad(cudaStream_t stream);

    //! Tensor `offset` of the flat vector (gpt::layout's offsets) with shape s.
    tensor<float> value(std::int64_t offset, shape s) const { return view_of<float>(value_, s, offset); }
    tensor<float> grad(std::int64_t offset, shape s) const { return view_of<float>(grad_, s, offset); }
    const device_buffer& values() const { return value_; }
    const device_buffer& grads() const { return grad_; }

    const gpt::config cfg;
    const gpt::layout lay;
    const int gpu;
    memory_pool& pool;

private:
    device_buffer value_, grad_;
};

//! Activations (or their gradients) between parts: [rows, tokens, d_model] floats on the device.
struct activation {
    std::int64_t rows = 0;
    std::int64_t tokens = 0;
    device_buffer data;
};

//! A contiguous range of the model on the GPU (see gpt::part, whose contract it follows: the
//! same refusals of units out of causal order, as tpipe::invalid_argument).
class part {
public:
    part(parameters& params, int layer_begin, int layer_end, bool first, bool last, cudaStream_t stream);
    ~part();
    part(part&&) noexcept;
    part& operator=(part&&) noexcept;

    //! Where the next calls enqueue their work (the buffers they receive are marked used there).
    void set_stream(cudaStream_t stream);
    cudaStream_t stream() const;

    //! Starts an iteration on batch `b` (kept by pointer; its tokens are copied to the GPU and
    //! checked: an id outside the vocabulary is refused here, since the kernels cannot throw).
    void begin(const gpt::batch* b, std::int64_t total_tokens = 0);
    activation forward(const tpipe::unit& u, activation in);
    activation backward_input(const tpipe::unit& u, activation grad_out);
    void backward_weight(const tpipe::unit& u);
    activation backward(const tpipe::unit& u, activation grad_out);

    //! The summed loss contributions so far / (B*L): waits for this part's stream.
    double loss() const;
    //! Adds the tied head's private gradient into the parameters' gradient (once per iteration).
    void flush_grad();

    bool first() const { return first_; }
    bool last() const { return last_; }
    parameters& params() { return *params_; }

private:
    struct impl;
    std::unique_ptr<impl> impl_;
    parameters* params_;
    int l0_, l1_;
    bool first_, last_;
};

//! One whole iteration on one part holding the whole model, as one unit (the reference).
double full_step(parameters& params, const gpt::batch& b, cudaStream_t stream);

//! Every unit of `units` forward through the parts, then backward in reverse order, on each
//! part's stream (no pipeline runtime). Zeroes the gradients first; returns the mean loss.
double run_in_order(const std::vector<part*>& parts, const tpipe::scheme& units, const gpt::batch& b);

//! AdamW on the device, gpt::adamw's update (bias correction, decay on matrices and
//! embeddings, gradients clipped to a global norm), with the clip factor computed on the GPU.
class adamw {
public:
    adamw(parameters& p, gpt::adamw_options o, cudaStream_t stream);
    void step(cudaStream_t stream);
    std::int64_t steps() const { return t_; }
    //! The global gradient norm the last step saw (waits for `stream`).
    double last_grad_norm(cudaStream_t stream) const;

private:
    parameters* p_;
    gpt::adamw_options o_;
    device_buffer m_, v_, decay_, sum_sq_;
    std::int64_t t_ = 0;
};

} // namespace gpt::cuda
