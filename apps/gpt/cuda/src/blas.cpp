#include "gpt_cuda/blas.hpp"

#include "gpt_cuda/gemm_operands.hpp"

#include <string>
#include <type_traits>

#include <tpipe/core/error.hpp>
#include <tpipe/cuda/cuda_error.hpp>

namespace gpt::cuda {
namespace {

void cublas_try(cublasStatus_t s, const char* call)
{
    if (s != CUBLAS_STATUS_SUCCESS)
        throw tpipe::cuda::cuda_error(std::string("gpt::cuda: ") + call + " failed: " + cublasGetStatusName(s) + ": " +
                                          cublasGetStatusString(s),
                                      static_cast<int>(s), call);
}

cublasOperation_t op(const column_major_operand& o) { return o.transposed ? CUBLAS_OP_T : CUBLAS_OP_N; }

} // namespace

blas::blas() { cublas_try(cublasCreate(&handle_), "cublasCreate"); }
blas::~blas() { cublasDestroy(handle_); }

void blas::bind(cudaStream_t stream) { cublas_try(cublasSetStream(handle_, stream), "cublasSetStream"); }

template <class T>
constexpr cudaDataType_t data_type()
{
    if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
    else return CUDA_R_16BF;
}

template <class S, class C>
void blas::gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a,
                        std::int64_t stride_a, mat<S> b, std::int64_t stride_b, C* c, std::int64_t ldc,
                        std::int64_t stride_c, bool accumulate)
{
    if (m == 0 || n == 0 || batch == 0) return;
    const column_major_operand A = as_operand(a, "A"), B = as_operand(b, "B");
    check_leading_dimensions(A, B, m, n, k, ldc);
    const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    if (batch == 1) {
        cublas_try(cublasGemmEx(handle_, op(B), op(A), blas_int(n, "n"), blas_int(m, "m"), blas_int(k, "k"), &one, b.data,
                                data_type<S>(), B.ld, a.data, data_type<S>(), A.ld, &beta, c, data_type<C>(),
                                blas_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   "cublasGemmEx");
        return;
    }
    cublas_try(cublasGemmStridedBatchedEx(handle_, op(B), op(A), blas_int(n, "n"), blas_int(m, "m"), blas_int(k, "k"),
                                          &one, b.data, data_type<S>(), B.ld, stride_b, a.data, data_type<S>(), A.ld,
                                          stride_a, &beta, c, data_type<C>(), blas_int(ldc, "ldc"), stride_c,
                                          blas_int(batch, "batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmStridedBatchedEx");
}

template void blas::gemm_batched<float, float>(std::int64_t, std::int64_t, std::int64_t, std::int64_t, mat<float>,
                                               std::int64_t, mat<float>, std::int64_t, float*, std::int64_t,
                                               std::int64_t, bool);
template void blas::gemm_batched<__nv_bfloat16, __nv_bfloat16>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                               mat<__nv_bfloat16>, std::int64_t, mat<__nv_bfloat16>,
                                                               std::int64_t, __nv_bfloat16*, std::int64_t, std::int64_t,
                                                               bool);
template void blas::gemm_batched<__nv_bfloat16, float>(std::int64_t, std::int64_t, std::int64_t, std::int64_t,
                                                       mat<__nv_bfloat16>, std::int64_t, mat<__nv_bfloat16>,
                                                       std::int64_t, float*, std::int64_t, std::int64_t, bool);

void blas::add(std::int64_t count, const float* x, float* y)
{
    const float one = 1.0f;
    cublas_try(cublasSaxpy(handle_, blas_int(count, "count"), &one, x, 1, y, 1), "cublasSaxpy");
}

} // namespace gpt::cuda
