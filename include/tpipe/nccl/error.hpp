#pragma once
// TPIPE_NCCL_TRY / TPIPE_NCCL_LOG / TPIPE_NCCL_ASSERT: the NCCL half of tpipe's error
// vocabulary (cpp-style rule 5; the CUDA half is tpipe/cuda/error.hpp).
//   TPIPE_NCCL_TRY(expr)     throws tpipe::nccl::nccl_error (file:line, call, error name and
//                            NCCL's string) unless expr returns ncclSuccess;
//   TPIPE_NCCL_LOG(expr)     returns the ncclResult_t, for noexcept paths (abort, destroy);
//   TPIPE_NCCL_ASSERT(expr)  TPIPE_NCCL_TRY in debug builds, the bare call under NDEBUG.
#include <nccl.h>

#include <string>

#include "tpipe/nccl/nccl_error.hpp"

namespace tpipe::nccl::detail {

//! The message for result `rc` of `call` at file:line.
inline std::string nccl_message(ncclResult_t rc, const char* call, const char* file, int line)
{
    return std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + ncclGetErrorString(rc) +
           " (ncclResult_t " + std::to_string(static_cast<int>(rc)) + ")";
}

inline void nccl_try(ncclResult_t rc, const char* call, const char* file, int line)
{
    if (rc != ncclSuccess) throw nccl_error(nccl_message(rc, call, file, line), static_cast<int>(rc));
}

} // namespace tpipe::nccl::detail

#define TPIPE_NCCL_TRY(expr) ::tpipe::nccl::detail::nccl_try((expr), #expr, __FILE__, __LINE__)
#define TPIPE_NCCL_LOG(expr) (expr)
#ifdef NDEBUG
#define TPIPE_NCCL_ASSERT(expr) ((void)(expr))
#else
#define TPIPE_NCCL_ASSERT(expr) TPIPE_NCCL_TRY(expr)
#endif
