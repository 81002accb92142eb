#pragma once
// Whether this process can use CUDA GPUs and, if not, why, in words: the check that GPU tests,
// benchmarks and trainers make before touching a device (no driver and no device are the usual
// answers on a machine without a GPU).
#include <cuda_runtime_api.h>

#include <optional>
#include <string>

namespace tpipe::cuda {

//! Empty when at least `wanted` CUDA devices can be used; otherwise the reason, e.g.
//! "cudaGetDeviceCount: cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA
//! runtime version" or "1 CUDA device(s), 2 needed".
inline std::optional<std::string> why_no_gpu(int wanted = 1)
{
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: leave no error behind for the caller's next call
        return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " + cudaGetErrorString(e);
    }
    if (n < wanted) return std::to_string(n) + " CUDA device(s), " + std::to_string(wanted) + " needed";
    return std::nullopt;
}

} // namespace tpipe::cuda
