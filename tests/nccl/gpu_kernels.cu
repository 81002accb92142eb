#include "gpu_kernels.hpp"

#include "tpipe/cuda/error_macros.hpp"

namespace {
__global__ void affine_k(const double* x, double* y, std::size_t n, double a, double b)
{
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}
__global__ void scale_k(const double* g, double* dx, std::size_t n, double a)
{
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i < n) dx[i] = a * g[i];
}
__global__ void accumulate_k(const double* x, const double* g, std::size_t n, double* grad)
{
    const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (i < n) {
        atomicAdd(&grad[0], x[i] * g[i]);
        atomicAdd(&grad[1], g[i]);
    }
}
unsigned blocks(std::size_t n) { return static_cast<unsigned>((n + 255) / 256); }
} // namespace

namespace tpipe_nccl_gpu {
void affine(const double* x, double* y, std::size_t n, double a, double b, cudaStream_t s)
{
    if (n == 0) return;
    affine_k<<<blocks(n), 256, 0, s>>>(x, y, n, a, b);
    TPIPE_CUDA_TRY(cudaGetLastError());
}
void scale(const double* g, double* dx, std::size_t n, double a, cudaStream_t s)
{
    if (n == 0) return;
    scale_k<<<blocks(n), 256, 0, s>>>(g, dx, n, a);
    TPIPE_CUDA_TRY(cudaGetLastError());
}
void accumulate(const double* x, const double* g, std::size_t n, double* grad, cudaStream_t s)
{
    if (n == 0) return;
    accumulate_k<<<blocks(n), 256, 0, s>>>(x, g, n, grad);
    TPIPE_CUDA_TRY(cudaGetLastError());
}
} // namespace tpipe_nccl_gpu
