#pragma once
// The device executor of the CUDA GPT's kernel bodies (gpt_cuda/kernels.hpp): rows(n, ...) runs
// one CUDA block per row, whose reductions are CUB block reductions; elements(n, ...) one thread
// per element (grid-stride). Kernels are enqueued on `stream`; a launch error throws
// tpipe::cuda::cuda_error. The templates are defined and instantiated for every body in
// src/kernels.cu (the only file nvcc compiles), so callers are plain C++.
#include <cstdint>

#include <cuda_runtime_api.h>

#include "gpt_cuda/kernels.hpp"

namespace gpt::cuda {

struct device_executor {
    static constexpr memory where = memory::device;
    cudaStream_t stream{};

    template <class Body>
    void rows(std::int64_t n, std::int64_t width, const Body& body);
    template <class Body>
    void elements(std::int64_t n, const Body& body);
};

} // namespace gpt::cuda
