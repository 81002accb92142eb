#pragma once
// The kernels of the NCCL GPU tests' stages (gpu_kernels.cu), callable from host code.
#include <cuda_runtime_api.h>

#include <cstddef>

namespace tpipe_nccl_gpu {
//! y[i] = a * x[i] + b
void affine(const double* x, double* y, std::size_t n, double a, double b, cudaStream_t s);
//! dx[i] = a * g[i]
void scale(const double* g, double* dx, std::size_t n, double a, cudaStream_t s);
//! grad[0] += sum x[i] * g[i], grad[1] += sum g[i] (integer-valued doubles: exact in any order)
void accumulate(const double* x, const double* g, std::size_t n, double* grad, cudaStream_t s);
} // namespace tpipe_nccl_gpu
