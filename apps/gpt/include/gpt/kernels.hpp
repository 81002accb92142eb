#pragma once
// CPU kernels of the reference GPT: GEMM on OpenBLAS, a small thread pool that splits work, and
// the fused row-wise passes (LayerNorm, bias + GELU, residual adds, softmax cross-entropy, causal
// attention over a K/V cache). Kernels are templates on the scalar type with explicit
// instantiations for float and double (compiled in src/, so that only the library needs the
// target's vector flags and the BLAS headers).
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace gpt {

//! A fixed set of worker threads; `run(n, fn)` calls fn(0..n-1) across them and the caller, so a
//! pool of T threads keeps exactly T cores busy. With one thread everything runs inline.
class thread_pool {
public:
    explicit thread_pool(int threads = 1);
    ~thread_pool();
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    int size() const { return threads_; }
    //! Runs fn(i) for i in [0, tasks); returns when all are done. Exceptions are rethrown.
    //! `fn` is called by reference: nothing is allocated per call.
    template <class F>
    void run(int tasks, F&& fn)
    {
        using Fn = std::remove_reference_t<F>;
        run_job({&fn, [](void* f, int i) { (*static_cast<Fn*>(f))(i); }}, tasks);
    }

private:
    struct job {
        void* fn = nullptr;
        void (*call)(void*, int) = nullptr;
    };
    void run_job(job j, int tasks);
    void work_loop();
    void stop_workers();  //!< stops and joins every started worker
    void drain(job j, int tasks);

    int threads_ = 1;
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable wake_, done_cv_;
    std::atomic<std::uint64_t> generation_{0};  // written under mu_, polled by idle workers
    std::atomic<bool> stop_{false};
    job job_{};
    int tasks_ = 0;
    int active_ = 0;
    std::atomic<int> next_{0};
    std::atomic<int> done_{0};
    std::exception_ptr error_;
};

//! A strided matrix view: element (i, j) is data[i * rs + j * cs]. Transposition swaps rs and cs.
//! GEMM operands need one unit stride (row-major or its transpose).
template <class T>
struct mat {
    const T* data;
    std::int64_t rs;
    std::int64_t cs;
    mat t() const { return {data, cs, rs}; }
};

//! C[m x n] (+)= A[m x k] * B[k x n]; C rows are ldc apart, columns contiguous. One
//! single-threaded BLAS call on the calling thread. Throws std::invalid_argument for an operand
//! without a unit stride.
template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
          bool accumulate);

//! The same, split across the pool's threads into blocks of C rows (or columns when C is short and
//! wide) chosen from the shape alone: the bits do not depend on the pool's size.
template <class T>
void gemm(thread_pool& pool, std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c,
          std::int64_t ldc, bool accumulate);

//! Plain triple loop, for tests of the BLAS path only.
template <class T>
void gemm_naive(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
                bool accumulate);

//! The kernel set OpenBLAS runs (e.g. "SkylakeX"), for reports.
const std::string& blas_core();

// ---- fused row-wise passes, split by rows across the pool -----------------------------------

//! y = LN(x) * g + b over rows of d; keeps mean and 1/std per row for the backward.
template <class T>
void layernorm_forward(thread_pool& pool, std::int64_t n, std::int64_t d, const T* x, const T* g, const T* b,
                       double eps, T* y, T* mean, T* rstd);
//! dx += d LN(x)/dx applied to dy.
template <class T>
void layernorm_backward(thread_pool& pool, std::int64_t n, std::int64_t d, const T* dy, const T* x, const T* mean,
                        const T* rstd, const T* g, T* dx);
//! dg += sum_i dy * xhat, db += sum_i dy (over the n rows).
template <class T>
void layernorm_param_grad(std::int64_t n, std::int64_t d, const T* dy, const T* x, const T* mean, const T* rstd,
                          T* dg, T* db);
//! In place: pre += bias (per column); act = GELU(pre) (tanh form). `pre` is kept for the backward.
template <class T>
void bias_gelu_forward(thread_pool& pool, std::int64_t n, std::int64_t f, const T* bias, T* pre, T* act);
//! In place: g = g * GELU'(pre).
template <class T>
void gelu_backward(thread_pool& pool, std::int64_t count, const T* pre, T* g);
//! y += bias (per column) + residual.
template <class T>
void add_bias_residual(thread_pool& pool, std::int64_t n, std::int64_t d, const T* bias, const T* residual, T* y);
//! y += bias (per column).
template <class T>
void add_bias(thread_pool& pool, std::int64_t n, std::int64_t d, const T* bias, T* y);
//! out += column sums of x [n x d].
template <class T>
void col_sum(std::int64_t n, std::int64_t d, const T* x, T* out);
//! In place over logits [n x V]: each row becomes (softmax - onehot(target)) * scale. Returns the
//! sum of the rows' cross-entropies. Throws std::invalid_argument for a target outside [0, V).
template <class T>
double softmax_cross_entropy(thread_pool& pool, std::int64_t n, std::int64_t V, const std::int32_t* targets,
                             T scale, T* logits);

//! Causal multi-head attention of a token slice over a K/V cache. Queries are tokens [t0, t0+s)
//! of `rows` sequences; query i of a row sees cached keys [0, t0+i]. Layout: q rows are ldq apart
//! inside [rows*s] (heads side by side, d_head each); the caches are [rows, L, d]; out is
//! [rows*s, d]. Blocks of queries read only the keys they see (a flash-style loop over query
//! blocks), parallel over (row, head). `probs` [rows*heads, s, t0+s] keeps the attention weights for
//! the backward.
struct attention_shape {
    std::int64_t rows, heads, d_head, s, t0, L;
    std::int64_t d() const { return heads * d_head; }
    std::int64_t t1() const { return t0 + s; }
};
template <class T>
void attention_forward(thread_pool& pool, const attention_shape& a, const T* q, std::int64_t ldq, const T* k,
                       const T* v, T* probs, T* out);
//! Backward of attention_forward: dq (ldq apart, overwritten), dk and dv added into the cache
//! gradients [rows, L, d] for every position < t1. `scratch` holds one dP block per pool thread.
template <class T>
void attention_backward(thread_pool& pool, const attention_shape& a, const T* q, std::int64_t ldq, const T* k,
                        const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv, std::vector<T>& scratch);

//! One AdamW update of a flat vector (vectorised): g = grad * clip; m, v updated in place;
//! value -= lr * weight_decay * value where decay[i]; value -= step_size * m / (sqrt(v) * rbc2 + eps).
struct adamw_coefficients {
    double lr, beta1, beta2, eps, weight_decay, clip, step_size, rbc2;
};
template <class T>
void adamw_update(std::int64_t count, const adamw_coefficients& c, const T* grad, const unsigned char* decay,
                  T* value, T* m, T* v);
//! Sum of squares of a flat vector, accumulated in double: the host reference of the CUDA GPT's
//! norm kernel (the CPU optimizer's clip sums exactly, with tpipe::exact_square_sum).
template <class T>
double sum_of_squares(std::int64_t count, const T* x);

} // namespace gpt
