#include "gpt/kernels.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gpt {

// ---- thread pool ---------------------------------------------------------------------------
thread_pool::thread_pool(int threads) : threads_(threads < 1 ? 1 : threads)
{
    try {
        for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work_loop(); });
    } catch (const std::system_error& e) {
        // The destructor does not run for a half-built pool: stop the workers already started
        // here, or they would wait forever (and their std::thread would terminate the process).
        const auto started = workers_.size();
        stop_workers();
        throw std::runtime_error("gpt::thread_pool: could start only " + std::to_string(started + 1) + " of " +
                                 std::to_string(threads_) + " threads (" + e.what() + "); use fewer threads");
    }
}

thread_pool::~thread_pool() { stop_workers(); }

void thread_pool::stop_workers()
{
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
}

void thread_pool::drain(job j, int tasks)
{
    for (;;) {
        int i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= tasks) return;
        try {
            j.call(j.fn, i);
        } catch (...) {
            std::lock_guard lk(mu_);
            if (!error_) error_ = std::current_exception();
        }
        done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

namespace {
// How long an idle worker (or a caller waiting for its workers) polls before it sleeps: the
// kernels of one step follow each other within microseconds, and a futex wake-up costs more
// than the short ones take.
constexpr auto pool_spin = std::chrono::microseconds(50);

template <class Ready>
bool spin_until(Ready ready)
{
    const auto until = std::chrono::steady_clock::now() + pool_spin;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (ready()) return true;
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        }
        if (std::chrono::steady_clock::now() >= until) return ready();
    }
}
} // namespace

void thread_pool::work_loop()
{
    std::uint64_t seen = 0;
    for (;;) {
        job j;
        int tasks = 0;
        spin_until([&] { return generation_.load(std::memory_order_acquire) != seen || stop_.load(); });
        {
            std::unique_lock lk(mu_);
            wake_.wait(lk, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
            if (stop_) return;
            seen = generation_.load(std::memory_order_relaxed);
            j = job_;
            tasks = tasks_;
            ++active_;
        }
        if (j.call) drain(j, tasks);
        {
            std::lock_guard lk(mu_);
            --active_;
        }
        done_cv_.notify_all();
    }
}

void thread_pool::run_job(job j, int tasks)
{
    if (tasks <= 0) return;
    if (threads_ == 1 || tasks == 1) {
        for (int i = 0; i < tasks; ++i) j.call(j.fn, i);
        return;
    }
    {
        std::unique_lock lk(mu_);
        done_cv_.wait(lk, [&] { return active_ == 0; });  // no worker still inside an earlier job
        job_ = j;
        tasks_ = tasks;
        next_.store(0, std::memory_order_relaxed);
        done_.store(0, std::memory_order_relaxed);
        error_ = nullptr;
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    drain(j, tasks);
    spin_until([&] { return done_.load(std::memory_order_acquire) == tasks; });
    std::exception_ptr err;
    {
        std::unique_lock lk(mu_);
        // Wait until every task ran and no worker still holds this job.
        done_cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire) == tasks && active_ == 0; });
        err = error_;
        job_ = {};
    }
    if (err) std::rethrow_exception(err);
}

// ---- reference GEMM ------------------------------------------------------------------------
template <class T>
void gemm_naive(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
                bool accumulate)
{
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            T s = accumulate ? c[i * ldc + j] : T(0);
            for (std::int64_t p = 0; p < k; ++p) s += a.data[i * a.rs + p * a.cs] * b.data[p * b.rs + j * b.cs];
            c[i * ldc + j] = s;
        }
}

namespace {

// exp in float by range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial (Cephes expf,
// ~1 ulp), written without branches or library calls so that loops over it vectorise; exact
// std::exp in double (the double build exists for the finite-difference checks).
inline float exp_fast(float x)
{
    x = x < -87.3365447504f ? -87.3365447504f : (x > 88.3762626647949f ? 88.3762626647949f : x);
    // Round to nearest by adding and removing 1.5 * 2^23 (std::floor does not vectorise
    // without -ffast-math); |x * log2(e)| < 128 here.
    constexpr float round_magic = 12582912.0f;
    const float n = (x * 1.44269504088896341f + round_magic) - round_magic;
    const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    const std::int32_t e = (static_cast<std::int32_t>(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &e, sizeof scale);  // 2^n (std::bit_cast does not vectorise in GCC 12)
    return p * scale;
}
template <class T>
inline T exp_(T x)
{
    if constexpr (std::is_same_v<T, float>) return exp_fast(x);
    else return std::exp(x);
}

constexpr double gelu_k = 0.7978845608028654;  // sqrt(2/pi)
constexpr double gelu_a = 0.044715;

// tanh(u) = 1 - 2 / (exp(2u) + 1): one exp, saturates correctly at both ends.
template <class T>
inline T tanh_(T u)
{
    return T(1) - T(2) / (exp_(T(2) * u) + T(1));
}
template <class T>
inline T gelu(T x)
{
    const T u = T(gelu_k) * (x + T(gelu_a) * x * x * x);
    return T(0.5) * x * (T(1) + tanh_(u));
}
template <class T>
inline T gelu_grad(T x)
{
    const T u = T(gelu_k) * (x + T(gelu_a) * x * x * x);
    const T th = tanh_(u);
    const T du = T(gelu_k) * (T(1) + T(3 * gelu_a) * x * x);
    return T(0.5) * (T(1) + th) + T(0.5) * x * (T(1) - th * th) * du;
}

// Splits [0, n) into at most pool.size() contiguous blocks of at least `grain` and runs
// fn(begin, end) on each.
template <class F>
void for_blocks(thread_pool& pool, std::int64_t n, std::int64_t grain, F&& fn)
{
    const std::int64_t parts = std::max<std::int64_t>(1, std::min<std::int64_t>(pool.size(), n / std::max<std::int64_t>(grain, 1)));
    if (parts == 1) {
        fn(std::int64_t(0), n);
        return;
    }
    const std::int64_t chunk = (n + parts - 1) / parts;
    pool.run(static_cast<int>(parts), [&](int t) {
        const std::int64_t lo = t * chunk, hi = std::min(n, lo + chunk);
        if (lo < hi) fn(lo, hi);
    });
}

// Rows of d below this much work stay on one thread.
constexpr std::int64_t row_grain_values = 16 * 1024;
std::int64_t row_grain(std::int64_t d) { return std::max<std::int64_t>(1, row_grain_values / std::max<std::int64_t>(d, 1)); }

template <class T>
T row_sum(std::int64_t d, const T* x)
{
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (std::int64_t c = 0; c < d; ++c) s += x[c];
    return s;
}

// The softmax's passes over a row, as calls of their own: inlined into the attention's per-head
// loop, GCC 12 kept them scalar (22 % of a long-sequence step in perf).
//
// The row's max: GCC 12 vectorises no float max reduction without -ffast-math (neither
// `omp simd reduction(max)` nor a hand-unrolled loop), so it is written on 16-float vectors
// (GCC's and Clang's vector extension), as wide as the target allows. Exact: a max in any order.
template <class T>
[[gnu::noinline]] T row_max(std::int64_t n, const T* x)
{
    constexpr T lowest = -std::numeric_limits<T>::infinity();
    T mx = lowest;
    std::int64_t j = 0;
    if constexpr (std::is_same_v<T, float>) {
        typedef float lanes __attribute__((vector_size(64)));
        lanes acc = lanes{} + lowest;
        for (; j + 16 <= n; j += 16) {
            lanes v;
            std::memcpy(&v, x + j, sizeof v);
            acc = v > acc ? v : acc;
        }
        for (int l = 0; l < 16; ++l) mx = std::max(mx, T(acc[l]));
    }
    for (; j < n; ++j) mx = std::max(mx, x[j]);
    return mx;
}

//! x[j] = exp((x[j] - shift) * scale) for j < n; returns their sum.
template <class T>
[[gnu::noinline]] T exp_in_place(std::int64_t n, T* x, T shift, T scale)
{
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t j = 0; j < n; ++j) {
        const T e = exp_((x[j] - shift) * scale);
        x[j] = e;
        sum += e;
    }
    return sum;
}

//! x[j] *= k for j < n.
template <class T>
void scale_in_place(std::int64_t n, T* x, T k)
{
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) x[j] *= k;
}

} // namespace

// ---- LayerNorm -----------------------------------------------------------------------------
template <class T>
void layernorm_forward(thread_pool& pool, std::int64_t n, std::int64_t d, const T* x, const T* g, const T* b,
                       double eps, T* y, T* mean, T* rstd)
{
    for_blocks(pool, n, row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
            const T* xi = x + i * d;
            const T m = row_sum(d, xi) / T(d);
            T v = 0;
#pragma omp simd reduction(+ : v)
            for (std::int64_t c = 0; c < d; ++c) v += (xi[c] - m) * (xi[c] - m);
            v /= T(d);
            const T r = T(1) / std::sqrt(v + T(eps));
            mean[i] = m;
            rstd[i] = r;
            T* yi = y + i * d;
#pragma omp simd
            for (std::int64_t c = 0; c < d; ++c) yi[c] = (xi[c] - m) * r * g[c] + b[c];
        }
    });
}

template <class T>
void layernorm_backward(thread_pool& pool, std::int64_t n, std::int64_t d, const T* dy, const T* x, const T* mean,
                        const T* rstd, const T* g, T* dx)
{
    for_blocks(pool, n, row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
            const T* xi = x + i * d;
            const T* dyi = dy + i * d;
            const T m = mean[i], r = rstd[i];
            T a = 0, bsum = 0;
#pragma omp simd reduction(+ : a, bsum)
            for (std::int64_t c = 0; c < d; ++c) {
                const T dxh = dyi[c] * g[c];
                a += dxh;
                bsum += dxh * (xi[c] - m) * r;
            }
            a /= T(d);
            bsum /= T(d);
            T* dxi = dx + i * d;
#pragma omp simd
            for (std::int64_t c = 0; c < d; ++c) {
                const T xh = (xi[c] - m) * r;
                dxi[c] += r * (dyi[c] * g[c] - a - xh * bsum);
            }
        }
    });
}

template <class T>
void layernorm_param_grad(std::int64_t n, std::int64_t d, const T* dy, const T* x, const T* mean, const T* rstd,
                          T* dg, T* db)
{
    for (std::int64_t i = 0; i < n; ++i) {
        const T* xi = x + i * d;
        const T* dyi = dy + i * d;
        const T m = mean[i], r = rstd[i];
#pragma omp simd
        for (std::int64_t c = 0; c < d; ++c) {
            dg[c] += dyi[c] * ((xi[c] - m) * r);
            db[c] += dyi[c];
        }
    }
}

// ---- element-wise --------------------------------------------------------------------------
template <class T>
void bias_gelu_forward(thread_pool& pool, std::int64_t n, std::int64_t f, const T* bias, T* pre, T* act)
{
    for_blocks(pool, n, row_grain(f), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
            T* p = pre + i * f;
            T* a = act + i * f;
#pragma omp simd
            for (std::int64_t c = 0; c < f; ++c) {
                const T x = p[c] + bias[c];
                p[c] = x;
                a[c] = gelu(x);
            }
        }
    });
}

template <class T>
void gelu_backward(thread_pool& pool, std::int64_t count, const T* pre, T* g)
{
    for_blocks(pool, count, row_grain_values, [&](std::int64_t lo, std::int64_t hi) {
#pragma omp simd
        for (std::int64_t i = lo; i < hi; ++i) g[i] *= gelu_grad(pre[i]);
    });
}

template <class T>
void add_bias_residual(thread_pool& pool, std::int64_t n, std::int64_t d, const T* bias, const T* residual, T* y)
{
    for_blocks(pool, n, row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
            T* yi = y + i * d;
            const T* ri = residual + i * d;
#pragma omp simd
            for (std::int64_t c = 0; c < d; ++c) yi[c] += bias[c] + ri[c];
        }
    });
}

template <class T>
void add_bias(thread_pool& pool, std::int64_t n, std::int64_t d, const T* bias, T* y)
{
    for_blocks(pool, n, row_grain(d), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
            T* yi = y + i * d;
#pragma omp simd
            for (std::int64_t c = 0; c < d; ++c) yi[c] += bias[c];
        }
    });
}

template <class T>
void col_sum(std::int64_t n, std::int64_t d, const T* x, T* out)
{
    for (std::int64_t i = 0; i < n; ++i) {
        const T* xi = x + i * d;
#pragma omp simd
        for (std::int64_t c = 0; c < d; ++c) out[c] += xi[c];
    }
}

// ---- softmax cross-entropy -----------------------------------------------------------------
template <class T>
double softmax_cross_entropy(thread_pool& pool, std::int64_t n, std::int64_t V, const std::int32_t* targets,
                             T scale, T* logits)
{
    for (std::int64_t i = 0; i < n; ++i)
        if (targets[i] < 0 || targets[i] >= V)
            throw std::invalid_argument("gpt: target id " + std::to_string(targets[i]) + " outside the vocabulary [0, " +
                                        std::to_string(V) + ")");
    // Per-row losses, summed in row order afterwards: the loss does not depend on the thread count.
    thread_local std::vector<double> caller_rows;
    std::vector<double>& row_loss = caller_rows;  // the caller's buffer, also inside the pool's threads
    row_loss.resize(static_cast<std::size_t>(n));
    for_blocks(pool, n, row_grain(V), [&](std::int64_t lo, std::int64_t hi) {
        for (std::int64_t i = lo; i < hi; ++i) {
            T* z = logits + i * V;
            const std::int32_t tgt = targets[i];
            const T mx = row_max(V, z);
            const T zt = z[tgt] - mx;
            const T sum = exp_in_place(V, z, mx, T(1));
            row_loss[static_cast<std::size_t>(i)] = static_cast<double>(std::log(sum) - zt);
            scale_in_place(V, z, scale / sum);
            z[tgt] -= scale;
        }
    });
    double loss = 0;
    for (std::int64_t i = 0; i < n; ++i) loss += row_loss[static_cast<std::size_t>(i)];
    return loss;
}

// ---- attention -----------------------------------------------------------------------------
namespace {
//! Queries per attention block: a block of queries reads only the keys it can see.
constexpr std::int64_t query_block = 64;
} // namespace

template <class T>
void attention_forward(thread_pool& pool, const attention_shape& a, const T* q, std::int64_t ldq, const T* k,
                       const T* v, T* probs, T* out)
{
    const std::int64_t H = a.heads, dh = a.d_head, s = a.s, t0 = a.t0, t1 = a.t1(), d = a.d(), L = a.L;
    const T scale = T(1) / std::sqrt(T(dh));
    pool.run(static_cast<int>(a.rows * H), [&](int rh) {
        const std::int64_t r = rh / H, h = rh % H;
        T* P = probs + rh * s * t1;
        const T* Kr = k + r * L * d + h * dh;
        const T* Vr = v + r * L * d + h * dh;
        for (std::int64_t i0 = 0; i0 < s; i0 += query_block) {
            const std::int64_t i1 = std::min(s, i0 + query_block), kl = t0 + i1;
            T* Pb = P + i0 * t1;
            gemm<T>(i1 - i0, kl, dh, {q + (r * s + i0) * ldq + h * dh, ldq, 1}, {Kr, 1, d}, Pb, t1, false);
            for (std::int64_t i = i0; i < i1; ++i) {
                T* row = P + i * t1;
                const std::int64_t lim = t0 + i + 1;
                const T sum = exp_in_place(lim, row, row_max(lim, row), scale);
                scale_in_place(lim, row, T(1) / sum);
                std::fill(row + lim, row + t1, T(0));
            }
            gemm<T>(i1 - i0, dh, kl, {Pb, t1, 1}, {Vr, d, 1}, out + (r * s + i0) * d + h * dh, d, false);
        }
    });
}

template <class T>
void attention_backward(thread_pool& pool, const attention_shape& a, const T* q, std::int64_t ldq, const T* k,
                        const T* v, const T* probs, const T* dout, T* dq, T* dk, T* dv, std::vector<T>& scratch)
{
    const std::int64_t H = a.heads, dh = a.d_head, s = a.s, t0 = a.t0, t1 = a.t1(), d = a.d(), L = a.L;
    const T scale = T(1) / std::sqrt(T(dh));
    const std::int64_t block = std::min(s, query_block) * t1;
    scratch.resize(static_cast<std::size_t>(a.rows * H * block));
    pool.run(static_cast<int>(a.rows * H), [&](int rh) {
        const std::int64_t r = rh / H, h = rh % H;
        const T* P = probs + rh * s * t1;
        const T* Kr = k + r * L * d + h * dh;
        const T* Vr = v + r * L * d + h * dh;
        T* dKr = dk + r * L * d + h * dh;
        T* dVr = dv + r * L * d + h * dh;
        T* dP = scratch.data() + rh * block;
        for (std::int64_t i0 = 0; i0 < s; i0 += query_block) {
            const std::int64_t i1 = std::min(s, i0 + query_block), kl = t0 + i1, ib = i1 - i0;
            const T* Pb = P + i0 * t1;
            const T* dO = dout + (r * s + i0) * d + h * dh;
            const T* Q = q + (r * s + i0) * ldq + h * dh;
            gemm<T>(ib, kl, dh, {dO, d, 1}, {Vr, 1, d}, dP, kl, false);  // dP = dO V^T
            gemm<T>(kl, dh, ib, {Pb, 1, t1}, {dO, d, 1}, dVr, d, true);   // dV += P^T dO
            for (std::int64_t i = 0; i < ib; ++i) {
                const std::int64_t lim = t0 + i0 + i + 1;
                T* dpi = dP + i * kl;
                const T* pi = Pb + i * t1;
                T dot = 0;
#pragma omp simd reduction(+ : dot)
                for (std::int64_t j = 0; j < lim; ++j) dot += dpi[j] * pi[j];
#pragma omp simd
                for (std::int64_t j = 0; j < lim; ++j) dpi[j] = pi[j] * (dpi[j] - dot) * scale;
                std::fill(dpi + lim, dpi + kl, T(0));
            }
            gemm<T>(ib, dh, kl, {dP, kl, 1}, {Kr, d, 1}, dq + (r * s + i0) * ldq + h * dh, ldq, false);  // dQ = dS K
            gemm<T>(kl, dh, ib, {dP, 1, kl}, {Q, ldq, 1}, dKr, d, true);                                // dK += dS^T Q
        }
    });
}

// ---- optimizer -----------------------------------------------------------------------------
template <class T>
void adamw_update(std::int64_t count, const adamw_coefficients& c, const T* grad, const unsigned char* decay,
                  T* value, T* m, T* v)
{
    const T b1 = T(c.beta1), b2 = T(c.beta2), eps = T(c.eps), clip = T(c.clip), step = T(c.step_size),
            rbc2 = T(c.rbc2), shrink = T(c.lr * c.weight_decay);
#pragma omp simd
    for (std::int64_t i = 0; i < count; ++i) {
        const T g = grad[i] * clip;
        const T mi = b1 * m[i] + (T(1) - b1) * g;
        const T vi = b2 * v[i] + (T(1) - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        const T w = value[i] - shrink * T(decay[i]) * value[i];  // decay[i] is 0 or 1: no branch
        value[i] = w - step * mi / (std::sqrt(vi) * rbc2 + eps);
    }
}

template <class T>
double sum_of_squares(std::int64_t count, const T* x)
{
    // Eight partial sums by index mod 8, combined in a fixed tree: the bits depend on the values
    // and their order only, not on where the vector starts in memory (an `omp simd` reduction
    // may peel for alignment).
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::int64_t i = 0;
    for (; i + 8 <= count; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += double(x[i + k]) * double(x[i + k]);
    for (int k = 0; i < count; ++i, ++k) acc[k] += double(x[i]) * double(x[i]);
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

#define GPT_INSTANTIATE(T)                                                                                           \
    template void gemm_naive<T>(std::int64_t, std::int64_t, std::int64_t, mat<T>, mat<T>, T*, std::int64_t, bool);   \
    template void layernorm_forward<T>(thread_pool&, std::int64_t, std::int64_t, const T*, const T*, const T*, double, \
                                       T*, T*, T*);                                                                  \
    template void layernorm_backward<T>(thread_pool&, std::int64_t, std::int64_t, const T*, const T*, const T*,       \
                                        const T*, const T*, T*);                                                     \
    template void layernorm_param_grad<T>(std::int64_t, std::int64_t, const T*, const T*, const T*, const T*, T*, T*); \
    template void bias_gelu_forward<T>(thread_pool&, std::int64_t, std::int64_t, const T*, T*, T*);                  \
    template void gelu_backward<T>(thread_pool&, std::int64_t, const T*, T*);                                        \
    template void add_bias_residual<T>(thread_pool&, std::int64_t, std::int64_t, const T*, const T*, T*);            \
    template void add_bias<T>(thread_pool&, std::int64_t, std::int64_t, const T*, T*);                               \
    template void col_sum<T>(std::int64_t, std::int64_t, const T*, T*);                                              \
    template double softmax_cross_entropy<T>(thread_pool&, std::int64_t, std::int64_t, const std::int32_t*, T, T*);  \
    template void attention_forward<T>(thread_pool&, const attention_shape&, const T*, std::int64_t, const T*,       \
                                       const T*, T*, T*);                                                            \
    template void attention_backward<T>(thread_pool&, const attention_shape&, const T*, std::int64_t, const T*,      \
                                        const T*, const T*, const T*, T*, T*, T*, std::vector<T>&);                  \
    template void adamw_update<T>(std::int64_t, const adamw_coefficients&, const T*, const unsigned char*, T*, T*,   \
                                  T*);                                                                               \
    template double sum_of_squares<T>(std::int64_t, const T*);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
#undef GPT_INSTANTIATE

} // namespace gpt
