#pragma once
// The CUDA runtime's error macros (cpp-style rule 5):
//   TPIPE_CUDA_TRY(cudaMalloc(&p, n));              // throws tpipe::cuda::cuda_error
//   if (TPIPE_CUDA_LOG(cudaFree(p)) != cudaSuccess)  // noexcept paths: logs to stderr, returns the status
//   TPIPE_CUDA_ASSERT(cudaEventQuery(e));           // debug builds: aborts on failure; NDEBUG: evaluates only
// TRY clears the runtime's last error after a failure (cudaGetLastError) so that a non-sticky
// error does not resurface in an unrelated later call; the message names file:line, the call,
// the error's name and its description.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tpipe/cuda/cuda_error.hpp"

namespace tpipe::cuda::detail {

inline std::string cuda_message(cudaError_t e, const char* call, const char* file, int line)
{
    return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e);
}

inline void cuda_try(cudaError_t e, const char* call, const char* file, int line)
{
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();  // a non-sticky error must not leak into the next call
    throw cuda_error(cuda_message(e, call, file, line), static_cast<int>(e), call);
}

inline cudaError_t cuda_log(cudaError_t e, const char* call, const char* file, int line) noexcept
{
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        std::fprintf(stderr, "tpipe: %s:%d: %s failed: %s: %s\n", file, line, call, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    return e;
}

} // namespace tpipe::cuda::detail

#define TPIPE_CUDA_TRY(expr) ::tpipe::cuda::detail::cuda_try((expr), #expr, __FILE__, __LINE__)
#define TPIPE_CUDA_LOG(expr) ::tpipe::cuda::detail::cuda_log((expr), #expr, __FILE__, __LINE__)
#ifdef NDEBUG
#define TPIPE_CUDA_ASSERT(expr) ((void)(expr))
#else
#define TPIPE_CUDA_ASSERT(expr)                                                                                        \
    do {                                                                                                               \
        if (::tpipe::cuda::detail::cuda_log((expr), #expr, __FILE__, __LINE__) != cudaSuccess) std::abort();         \
    } while (0)
#endif
