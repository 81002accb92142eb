#pragma once
// The CUDA GPT's matrix products on cuBLAS, in the CPU GPT's row-major terms: C[m x n] (+)= A B
// with A and B given as gpt::mat views (one unit stride, row-major or its transpose). cuBLAS is
// column-major, so each call computes C^T = B^T A^T. FP32 throughout (cublasSgemm computes in
// CUBLAS_COMPUTE_32F; the default math mode does not substitute TF32).
#include <cstdint>

#include <cublas_v2.h>
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
    //! operand without a unit stride, tpipe::cuda::cuda_error when cuBLAS refuses the call.
    void gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<float> a, mat<float> b, float* c, std::int64_t ldc,
              bool accumulate);
    //! `batch` such products, operand i at a + i*stride_a, b + i*stride_b, c + i*stride_c.
    void gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, mat<float> a,
                      std::int64_t stride_a, mat<float> b, std::int64_t stride_b, float* c, std::int64_t ldc,
                      std::int64_t stride_c, bool accumulate);
    //! y += x over `count` floats.
    void add(std::int64_t count, const float* x, float* y);

private:
    cublasHandle_t handle_{};
};

} // namespace gpt::cuda
