#pragma once
// The host backend of the CUDA GPT's part (gpt_cuda/basic_model.hpp): buffers in host memory,
// the kernels' bodies through the serial executor, and matrix products by a reference loop that
// takes the same column-major operands cuBLAS gets (gpt_cuda/gemm_operands.hpp). It runs the
// part's whole orchestration — buffers, K/V cache, attention strides, GEMM operand mapping, loss —
// on the CPU, where the tests compare it with the CPU GPT. Not a fast path: it exists to test.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "gpt_cuda/gemm_operands.hpp"
#include "gpt_cuda/bfloat16.hpp"
#include "gpt_cuda/serial.hpp"

namespace gpt::cuda {

//! A movable block of host memory with device_buffer's interface (what the part uses of it).
class host_buffer {
public:
    host_buffer() = default;
    explicit host_buffer(std::size_t bytes)
        : bytes_(bytes), data_(std::make_unique<double[]>((bytes + sizeof(double) - 1) / sizeof(double)))
    {
    }
    explicit operator bool() const noexcept { return data_ != nullptr; }
    std::size_t bytes() const noexcept { return bytes_; }
    void* data() const noexcept { return data_.get(); }
    template <class T>
    T* data_as() const noexcept
    {
        return reinterpret_cast<T*>(data_.get());
    }

private:
    std::size_t bytes_ = 0;
    std::unique_ptr<double[]> data_;  // double: aligned for every element type the part uses
};

//! Column-major C'[n x m] (+)= op(B')[n x k] op(A')[k x m], as cublasGemmEx computes it: operands
//! of type S read as float, sums in float, C rounded to its type once.
template <class S, class C>
void reference_gemm(column_major_operand B, const S* b, column_major_operand A, const S* a, std::int64_t n,
                    std::int64_t m, std::int64_t k, bool accumulate, C* c, std::int64_t ldc)
{
    auto at = [](column_major_operand o, const S* x, std::int64_t r, std::int64_t col) {
        return float(o.transposed ? x[col + r * o.ld] : x[r + col * o.ld]);
    };
    for (std::int64_t j = 0; j < m; ++j)
        for (std::int64_t i = 0; i < n; ++i) {
            float s = 0;
            for (std::int64_t p = 0; p < k; ++p) s += at(B, b, i, p) * at(A, a, p, j);
            C& out = c[i + j * ldc];
            out = C(accumulate ? float(out) + s : s);
        }
}

class host_backend {
public:
    using buffer = host_buffer;
    using stream_type = int;  //!< no streams on the host: everything runs in call order
    struct place {};
    static constexpr memory where = memory::host;

    //! The matrix products, with the cuBLAS wrapper's interface.
    struct blas {
        template <class S, class C>
        void gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a, mat<S> b, C* c, std::int64_t ldc,
                  bool accumulate)
        {
            gemm_batched(1, m, n, k, a, 0, b, 0, c, ldc, 0, accumulate);
        }
        template <class S, class C>
        void gemm_batched(std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, mat<S> a,
                          std::int64_t stride_a, mat<S> b, std::int64_t stride_b, C* c, std::int64_t ldc,
                          std::int64_t stride_c, bool accumulate)
        {
            const column_major_operand A = as_operand(a, "A"), B = as_operand(b, "B");
            check_leading_dimensions(A, B, m, n, k, ldc);
            for (std::int64_t i = 0; i < batch; ++i)
                reference_gemm(B, b.data + i * stride_b, A, a.data + i * stride_a, n, m, k, accumulate,
                               c + i * stride_c, ldc);
        }
        void add(std::int64_t count, const float* x, float* y)
        {
            for (std::int64_t i = 0; i < count; ++i) y[i] += x[i];
        }
    };

    host_backend(place, stream_type) {}
    static stream_type current_stream() { return 0; }
    void set_stream(stream_type) {}
    stream_type stream() const { return 0; }

    buffer alloc(std::size_t bytes) { return buffer(bytes); }
    void zero(buffer& b) { std::memset(b.data(), 0, b.bytes()); }
    void copy(const buffer& from, buffer& to) { std::memcpy(to.data(), from.data(), from.bytes()); }
    void upload(buffer& to, const void* from, std::size_t bytes) { std::memcpy(to.data(), from, bytes); }
    void download(void* to, const buffer& from, std::size_t bytes) { std::memcpy(to, from.data(), bytes); }
    void sync() {}
    void received(buffer&) {}

    serial_executor& ex() { return ex_; }
    blas& gemms() { return blas_; }

private:
    serial_executor ex_;
    blas blas_;
};

} // namespace gpt::cuda
