#pragma once
// How a row-major product C[m x n] (+)= A[m x k] B[k x n] on gpt::mat views becomes a column-major
// (cuBLAS) call: C^T = B^T A^T, each operand N or T with its leading dimension. Shared by the
// cuBLAS wrapper and the host backend's reference GEMM, so the mapping runs in the CPU tests.
#include <cstdint>
#include <limits>
#include <string>

#include <tpipe/core/error.hpp>

#include "gpt/kernels.hpp"

namespace gpt::cuda {

struct column_major_operand {
    bool transposed;  //!< CUBLAS_OP_T (else CUBLAS_OP_N)
    int ld;
};

//! cuBLAS takes int sizes: refuses what does not fit.
inline int blas_int(std::int64_t v, const char* what)
{
    if (v < 0 || v > std::numeric_limits<int>::max())
        throw tpipe::invalid_argument(std::string("gpt::cuda::gemm: ") + what + " = " + std::to_string(v) +
                                      " does not fit cuBLAS's int");
    return static_cast<int>(v);
}

//! A row-major view (rows rs apart, columns cs apart, one of them 1) as a column-major operand.
template <class T>
column_major_operand as_operand(const mat<T>& x, const char* name)
{
    if (x.cs == 1) return {false, blas_int(x.rs, name)};
    if (x.rs == 1) return {true, blas_int(x.cs, name)};
    throw tpipe::invalid_argument(std::string("gpt::cuda::gemm: operand ") + name + " has strides (" +
                                  std::to_string(x.rs) + ", " + std::to_string(x.cs) + "); one of them must be 1");
}

//! cuBLAS's leading-dimension rules for C'[n x m] = op(B')[n x k] op(A')[k x m]: an operand
//! stored untransposed needs ld >= its rows, a transposed one ld >= its columns; C' needs
//! ldc >= n. Checked before every call (the host backend's reference GEMM too, so the CPU tests
//! prove the part's calls would be accepted), naming the operand.
inline void check_leading_dimensions(const column_major_operand& A, const column_major_operand& B, std::int64_t m,
                                     std::int64_t n, std::int64_t k, std::int64_t ldc)
{
    auto need = [](const char* name, const column_major_operand& o, std::int64_t rows_if_n, std::int64_t rows_if_t) {
        const std::int64_t rows = o.transposed ? rows_if_t : rows_if_n;
        if (o.ld < (rows > 1 ? rows : 1))
            throw tpipe::invalid_argument(std::string("gpt::cuda::gemm: operand ") + name + " has leading dimension " +
                                          std::to_string(o.ld) + ", cuBLAS needs at least " + std::to_string(rows));
    };
    need("B", B, n, k);  // op(B') is n x k: stored n x k (N) or k x n (T)
    need("A", A, k, m);  // op(A') is k x m: stored k x m (N) or m x k (T)
    if (ldc < (n > 1 ? n : 1))
        throw tpipe::invalid_argument("gpt::cuda::gemm: C has leading dimension " + std::to_string(ldc) +
                                      ", cuBLAS needs at least " + std::to_string(n));
}

} // namespace gpt::cuda
