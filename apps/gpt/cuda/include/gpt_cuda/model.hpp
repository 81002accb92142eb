#pragma once
// The reference GPT on CUDA: gpt_cuda/basic_model.hpp over the device backend — buffers from a
// tpipe::cuda::memory_pool (so a steady-state iteration makes no driver allocation), the kernels
// on the device executor (CUB), matrix products on cuBLAS, work on the backend's stream. Only
// loss(), download() and last_grad_norm() wait for the GPU.
#include <cstddef>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <tpipe/cuda/memory_pool.hpp>

#include "gpt_cuda/basic_model.hpp"
#include "gpt_cuda/blas.hpp"
#include "gpt_cuda/device_executor.hpp"

namespace gpt::cuda {

using tpipe::cuda::device_buffer;
using tpipe::cuda::memory_pool;

class device_backend {
public:
    using buffer = device_buffer;
    using stream_type = cudaStream_t;
    //! Where a model's memory is: the pool it comes from and the GPU.
    struct place {
        memory_pool* pool = nullptr;
        int gpu = 0;
    };
    static constexpr memory where = memory::device;

    device_backend(place p, cudaStream_t stream);
    //! The compute stream the engine gives the stage running on this thread.
    static cudaStream_t current_stream();
    void set_stream(cudaStream_t stream);
    cudaStream_t stream() const { return ex_.stream; }

    buffer alloc(std::size_t bytes);
    void zero(buffer& b);
    void copy(const buffer& from, buffer& to);
    //! Copies host memory in; returns once `from` may change.
    void upload(buffer& to, const void* from, std::size_t bytes);
    //! Copies out to host memory; returns once it is there.
    void download(void* to, const buffer& from, std::size_t bytes);
    void sync();
    //! A buffer made on another stream: its reuse after the free also waits for this stream.
    void received(buffer& b);

    device_executor& ex() { return ex_; }
    gpt::cuda::blas& gemms() { return blas_; }

private:
    place place_;
    device_executor ex_;
    gpt::cuda::blas blas_;
};

using parameters = basic_parameters<device_backend>;
using activation = basic_activation<device_backend>;
using part = basic_part<device_backend>;
using adamw = basic_adamw<device_backend>;
//! bf16 storage (activations, caches, the weights the GEMMs read) with float master weights,
//! gradients, statistics and accumulation.
using bf16 = __nv_bfloat16;
using part_bf16 = basic_part<device_backend, bf16>;

// Compiled once, in src/model.cpp.
extern template class basic_parameters<device_backend>;
extern template class basic_part<device_backend>;
extern template class basic_part<device_backend, bf16>;
extern template class basic_adamw<device_backend>;
extern template double full_step<float, device_backend>(parameters&, const gpt::batch&, cudaStream_t);
extern template double full_step<bf16, device_backend>(parameters&, const gpt::batch&, cudaStream_t);
extern template double run_in_order<device_backend, float>(const std::vector<part*>&, const tpipe::scheme&,
                                                           const gpt::batch&);
extern template double run_in_order<device_backend, bf16>(const std::vector<part_bf16*>&, const tpipe::scheme&,
                                                          const gpt::batch&);

} // namespace gpt::cuda
