#pragma once
// Host entry points of tests/cuda/stage_kernels.cu (enqueue on the given stream, do not wait).
#include <cuda_runtime_api.h>

namespace kernels {
//! y = a x + b
void affine(const float* x, float* y, int n, float a, float b, cudaStream_t s);
//! dx = a g; da += x g; db += g (per element)
void affine_backward(const float* x, const float* g, float* dx, float* da, float* db, int n, float a, cudaStream_t s);
//! g = y - 3
void loss_grad(const float* y, float* g, int n, cudaStream_t s);
void empty(cudaStream_t s);
//! One thread that spins for `cycles` GPU clock cycles (a compute to overlap a copy with).
void busy(long long cycles, cudaStream_t s);
//! A launch that fails (non-sticky): 4096 threads per block.
void invalid_launch(cudaStream_t s);
} // namespace kernels
