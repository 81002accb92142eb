// The main of every GPU test executable: runs the Catch2 session only where a CUDA device can
// be used. Without one it prints why and exits 77, which CTest reports as skipped: a GPU test
// that did not run is never counted as passed. TPIPE_GPU_MIN_DEVICES=N (default 1) asks for N
// devices (NCCL between processes needs a distinct GPU per rank). Catch2's session:
// tests/catch_session.cpp.
#include "../catch_session.hpp"

#include <cuda_runtime_api.h>
#include <tpipe/cuda/availability.hpp>

#include <cstdio>
#include <cstdlib>

int main(int argc, char* argv[])
{
    int wanted = 1;
    if (const char* w = std::getenv("TPIPE_GPU_MIN_DEVICES")) wanted = std::atoi(w);
    if (const auto why = tpipe::cuda::why_no_gpu(wanted)) {
        std::printf("SKIPPED: %s: no usable GPU (%s)\n", argv[0], why->c_str());
        return 77;
    }
    int devices = 0;
    cudaGetDeviceCount(&devices);
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        std::printf("GPU 0 of %d: %s, compute capability %d.%d\n", devices, p.name, p.major, p.minor);
    return tpipe_test::run_catch(argc, argv);
}
