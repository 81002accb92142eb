#pragma once
// The NCCL half of tpipe's error macros (cpp-style rule 5; the CUDA half is tpipe/cuda/error_macros.hpp):
//   TPIPE_NCCL_TRY(ncclGroupEnd());                    // throws tpipe::nccl::nccl_error
//   if (TPIPE_NCCL_LOG(ncclCommAbort(c)) != ncclSuccess) // noexcept paths: logs to stderr, returns the result
//   TPIPE_NCCL_ASSERT(ncclCommCount(c, &n));           // debug builds: aborts on failure; NDEBUG: evaluates only
// The message names file:line, the call, NCCL's error string and the ncclResult_t.
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tpipe/nccl/nccl_error.hpp"

namespace tpipe::nccl::detail {

inline std::string nccl_message(ncclResult_t rc, const char* call, const char* file, int line)
{
    return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + ncclGetErrorString(rc) + " (ncclResult_t " +
           std::to_string(static_cast<int>(rc)) + ")";
}

inline void nccl_try(ncclResult_t rc, const char* call, const char* file, int line)
{
    if (rc != ncclSuccess) throw nccl_error(nccl_message(rc, call, file, line), static_cast<int>(rc));
}

inline ncclResult_t nccl_log(ncclResult_t rc, const char* call, const char* file, int line) noexcept
{
    if (rc != ncclSuccess) std::fprintf(stderr, "tpipe: %s:%d: %s failed: %s\n", file, line, call, ncclGetErrorString(rc));
    return rc;
}

} // namespace tpipe::nccl::detail

#define TPIPE_NCCL_TRY(expr) ::tpipe::nccl::detail::nccl_try((expr), #expr, __FILE__, __LINE__)
#define TPIPE_NCCL_LOG(expr) ::tpipe::nccl::detail::nccl_log((expr), #expr, __FILE__, __LINE__)
#ifdef NDEBUG
#define TPIPE_NCCL_ASSERT(expr) ((void)(expr))
#else
#define TPIPE_NCCL_ASSERT(expr)                                                                                        \
    do {                                                                                                               \
        if (::tpipe::nccl::detail::nccl_log((expr), #expr, __FILE__, __LINE__) != ncclSuccess) std::abort();         \
    } while (0)
#endif
