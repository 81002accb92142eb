// Synthetic stage kernels for the GPU tests and the CUDA engine benchmark: exact float
// arithmetic on small integers (so every schedule's sums are bitwise equal to the sequential
// run's, whatever the order), an empty kernel, and a launch with an invalid configuration.
#include "stage_kernels.hpp"

namespace {

__global__ void affine_kernel(const float* x, float* y, int n, float a, float b)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + b;
}

__global__ void affine_backward_kernel(const float* x, const float* g, float* dx, float* da, float* db, int n, float a)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        dx[i] = a * g[i];
        da[i] += x[i] * g[i];  // one thread per element: no atomics, the order is the stream's
        db[i] += g[i];
    }
}

__global__ void loss_grad_kernel(const float* y, float* g, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) g[i] = y[i] - 3.0f;
}

__global__ void empty_kernel() {}

__global__ void busy_kernel(long long cycles)
{
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
}

constexpr int block = 128;
int grid(int n) { return (n + block - 1) / block; }

} // namespace

namespace kernels {

void affine(const float* x, float* y, int n, float a, float b, cudaStream_t s)
{
    affine_kernel<<<grid(n), block, 0, s>>>(x, y, n, a, b);
}

void affine_backward(const float* x, const float* g, float* dx, float* da, float* db, int n, float a, cudaStream_t s)
{
    affine_backward_kernel<<<grid(n), block, 0, s>>>(x, g, dx, da, db, n, a);
}

void loss_grad(const float* y, float* g, int n, cudaStream_t s) { loss_grad_kernel<<<grid(n), block, 0, s>>>(y, g, n); }

void empty(cudaStream_t s) { empty_kernel<<<1, 1, 0, s>>>(); }

void busy(long long cycles, cudaStream_t s) { busy_kernel<<<1, 1, 0, s>>>(cycles); }

void invalid_launch(cudaStream_t s)
{
    empty_kernel<<<1, 4096, 0, s>>>();  // more threads per block than any GPU allows: cudaErrorInvalidConfiguration
}

} // namespace kernels
