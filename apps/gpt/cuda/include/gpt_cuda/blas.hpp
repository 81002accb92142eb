#pragma once
// The CUDA GPT's matrix products on cuBLAS, in the CPU GPT's row-major terms: C[m x n] (+)= A B
// with A and B given as gpt::mat views (one unit stride, row-major or its transpose). cuBLAS is
// column-major, so each call computes C^T = B^T A^T. Operands A, B of the storage type S (float or
// __nv_bfloat16), C of S or float; cublasGemmEx / cublasGemmStridedBatchedEx, always accumulating
// in FP32 (CUBLAS_COMPUTE_32F: no TF32, no reduced-precision accumulation).
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "gpt/kernels.hpp"

namespace gpt::cuda {

//! A cuBLAS handle, bound to the stream its owner currently enqueues on.
class blas {
public:
    blas();
    ~blas();
    blas(const blas&) = delete;
    blas& operator=(const blas&) = delete;

    void bind(cudaStream_t stream);
    //! C[m x n] (+)= A[m x k] B[k x n]; C's rows ldc apart. Throws tpipe::invalid_argument for an
    //! operand without a unit stride or a leading dimension cuBLAS refuses, tpipe::cuda::cuda_error
    //! when cuBLAS fails. Instantiated for S = float (C float) and S = __nv_bfloat16 (C bf16 or float).
    template <class S, class C>
    void gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a, mat<S> b, C* c, std::int64_t ldc,
              bool accumulate)
    {
        gemm_batched(1, m, n, k, a, 0, b, 0, c, ldc, 0, accumulate);
    }
    //! `batch` such products, operand i at a + i*stride_a, b + i*stride_b, c + i*stride_c.
    template <class S, class C>
    void gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a,
                      std::int64_t stride_a, mat<S> b, std::int64_t stride_b, C* c, std::int64_t ldc,
                      std::int64_t stride_c, bool accumulate);
    //! y += x over `count` floats.
    void add(std::int64_t count, const float* x, float* y);

private:
    cublasHandle_t handle_{};
};

} // namespace gpt::cuda
