// The toolchain works end to end: a kernel compiled here runs on the device and its result comes
// back (the first thing to check on a GPU machine; the engine's tests come after it).
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <vector>

namespace {
__global__ void iota_kernel(float* out, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = static_cast<float>(i) * 0.5f;
}
} // namespace

TEST_CASE("a kernel launched on a stream writes every element it should", "[cuda]")
{
    constexpr int n = 1000;
    float* d = nullptr;
    REQUIRE(cudaMalloc(&d, n * sizeof(float)) == cudaSuccess);
    cudaStream_t s{};
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    iota_kernel<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<float> h(n, -1.0f);
    REQUIRE(cudaMemcpyAsync(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    for (int i = 0; i < n; ++i) REQUIRE(h[static_cast<std::size_t>(i)] == static_cast<float>(i) * 0.5f);
    cudaStreamDestroy(s);
    cudaFree(d);
}
