#pragma once
// The CUDA GPT's row-wise and element-wise kernels, written once for the device and the host.
//
// Each kernel is a body (a struct with a TPIPE_HOST_DEVICE call operator) and a launcher that
// checks every tensor's shape and memory, then hands the body to an executor:
//   ex.rows(n, body)      calls body(row, i) for each row i in [0, n); `row` reduces over the
//                         row's columns (row.sum / row.max / row.each / row.once) — one CUDA block
//                         per row with CUB block reductions on the device, a loop on the host;
//   ex.elements(n, body)  calls body(e) for each e in [0, n) — one thread each on the device.
//   ex.where              the memory the executor runs on (memory::device or memory::host).
// gpt_cuda/serial.hpp is the host executor (the CPU tests run the bodies through it and compare
// them with the CPU GPT's kernels); src/kernels.cu holds the device executor. No CUDA header.
//
// Semantics follow gpt/kernels.hpp (apps/gpt), in float: LayerNorm keeps mean and 1/std per
// row, GELU is the tanh form, the attention softmax is causal over a K/V-cached slice, softmax
// cross-entropy turns logits into (softmax - onehot) * scale in place.
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "gpt_cuda/host_device.hpp"
#include "gpt_cuda/tensor.hpp"

namespace gpt::cuda {

// ---- scalar functions ------------------------------------------------------------------------
namespace body {

constexpr float gelu_k = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float gelu_a = 0.044715f;

// tanh(u) = 1 - 2 / (exp(2u) + 1): one exp, saturates correctly at both ends (the CPU GPT's form).
TPIPE_HOST_DEVICE inline float tanh_via_exp(float u) { return 1.0f - 2.0f / (expf(2.0f * u) + 1.0f); }
TPIPE_HOST_DEVICE inline float gelu(float x)
{
    const float u = gelu_k * (x + gelu_a * x * x * x);
    return 0.5f * x * (1.0f + tanh_via_exp(u));
}
TPIPE_HOST_DEVICE inline float gelu_grad(float x)
{
    const float u = gelu_k * (x + gelu_a * x * x * x);
    const float th = tanh_via_exp(u);
    const float du = gelu_k * (1.0f + 3.0f * gelu_a * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
}

// ---- row bodies (one row per call; `row` is the executor's view of the row) -------------------

//! y = (x - mean) / std * g + b over one row of d; keeps mean and 1/std.
template <class S>
struct layernorm_forward {
    std::int64_t d;
    float eps;
    const S* x;
    const float *g, *b;
    S* y;
    float *mean, *rstd;
    TPIPE_HD_TEMPLATE template <class Row>
    TPIPE_HOST_DEVICE void operator()(Row& row, std::int64_t i) const
    {
        const S* xi = x + i * d;
        S* yi = y + i * d;
        const float m = row.sum(d, [&](std::int64_t c) { return float(xi[c]); }) / float(d);
        const float v = row.sum(d, [&](std::int64_t c) { return (float(xi[c]) - m) * (float(xi[c]) - m); }) / float(d);
        const float r = 1.0f / sqrtf(v + eps);
        row.once([&] {
            mean[i] = m;
            rstd[i] = r;
        });
        const float *gg = g, *bb = b;
        row.each(d, [&](std::int64_t c) { yi[c] = S((float(xi[c]) - m) * r * gg[c] + bb[c]); });
    }
};

//! dx += d LN(x)/dx applied to dy, one row.
template <class S>
struct layernorm_backward {
    std::int64_t d;
    const S *dy, *x;
    const float *mean, *rstd, *g;
    S* dx;
    TPIPE_HD_TEMPLATE template <class Row>
    TPIPE_HOST_DEVICE void operator()(Row& row, std::int64_t i) const
    {
        const S* xi = x + i * d;
        const S* dyi = dy + i * d;
        S* dxi = dx + i * d;
        const float m = mean[i], r = rstd[i];
        const float* gg = g;
        const float a = row.sum(d, [&](std::int64_t c) { return float(dyi[c]) * gg[c]; }) / float(d);
        const float bs =
            row.sum(d, [&](std::int64_t c) { return float(dyi[c]) * gg[c] * ((float(xi[c]) - m) * r); }) / float(d);
        row.each(d, [&](std::int64_t c) {
            const float xh = (float(xi[c]) - m) * r;
            dxi[c] = S(float(dxi[c]) + r * (float(dyi[c]) * gg[c] - a - xh * bs));
        });
    }
};

//! The attention's causal softmax over one score row of a K/V-cached slice, in place. Rows are
//! [rows*heads, s, t1] with t1 = t0 + s; query i of the slice sees keys [0, t0 + i]; the rest of
//! its row becomes 0.
template <class S>
struct causal_softmax_forward {
    std::int64_t s, t0;
    float scale;
    S* p;
    TPIPE_HD_TEMPLATE template <class Row>
    TPIPE_HOST_DEVICE void operator()(Row& row, std::int64_t i) const
    {
        const std::int64_t t1 = t0 + s, lim = t0 + i % s + 1;
        S* pi = p + i * t1;
        const float mx = row.max(lim, [&](std::int64_t j) { return float(pi[j]); });
        const float sum = row.sum(lim, [&](std::int64_t j) { return expf((float(pi[j]) - mx) * scale); });
        const float inv = 1.0f / sum;
        const float sc = scale;
        row.each(t1, [&](std::int64_t j) { pi[j] = S(j < lim ? expf((float(pi[j]) - mx) * sc) * inv : 0.0f); });
    }
};

//! Its backward, in place on dp: dS = P * (dP - sum_j dP_j P_j) * scale, 0 where masked.
template <class S>
struct causal_softmax_backward {
    std::int64_t s, t0;
    float scale;
    const S* p;
    S* dp;
    TPIPE_HD_TEMPLATE template <class Row>
    TPIPE_HOST_DEVICE void operator()(Row& row, std::int64_t i) const
    {
        const std::int64_t t1 = t0 + s, lim = t0 + i % s + 1;
        const S* pi = p + i * t1;
        S* di = dp + i * t1;
        const float dot = row.sum(lim, [&](std::int64_t j) { return float(di[j]) * float(pi[j]); });
        const float sc = scale;
        row.each(t1, [&](std::int64_t j) { di[j] = S(j < lim ? float(pi[j]) * (float(di[j]) - dot) * sc : 0.0f); });
    }
};

//! One row of logits [V] becomes (softmax - onehot(target)) * scale; its cross-entropy goes to
//! row_loss[i]. A target outside [0, V) gives a NaN loss (launchers' callers check targets on the
//! host, where the batch is; the device cannot throw).
template <class S>
struct softmax_cross_entropy {
    std::int64_t V;
    float scale;
    const std::int32_t* targets;
    S* z;
    double* row_loss;
    TPIPE_HD_TEMPLATE template <class Row>
    TPIPE_HOST_DEVICE void operator()(Row& row, std::int64_t i) const
    {
        S* zi = z + i * V;
        const std::int32_t tgt = targets[i];
        if (tgt < 0 || tgt >= V) {
            row.once([&] { row_loss[i] = NAN; });
            return;
        }
        const float mx = row.max(V, [&](std::int64_t c) { return float(zi[c]); });
        const float zt = float(zi[tgt]) - mx;
        const float sum = row.sum(V, [&](std::int64_t c) { return expf(float(zi[c]) - mx); });
        const float k = scale / sum;
        const float sc = scale;
        row.each(V, [&](std::int64_t c) {
            const float p = expf(float(zi[c]) - mx) * k;
            zi[c] = S(c == tgt ? p - sc : p);  // the target's entry rounded once
        });
        row.once([&] { row_loss[i] = static_cast<double>(logf(sum) - zt); });
    }
};

//! out += the sum (of squares, with Square) of chunk i of x, accumulated in double, `chunk`
//! values per row: one atomic add per chunk.
template <class T, bool Square>
struct chunk_sum {
    std::int64_t count, chunk;
    const T* x;
    double* out;
    TPIPE_HD_TEMPLATE template <class Row>
    TPIPE_HOST_DEVICE void operator()(Row& row, std::int64_t i) const
    {
        const std::int64_t lo = i * chunk, n = count - lo < chunk ? count - lo : chunk;
        const T* xi = x + lo;
        const double s = row.sum(n, [&](std::int64_t c) { return Square ? double(xi[c]) * double(xi[c]) : double(xi[c]); });
        double* o = out;
        row.once([&] { accumulate(o, s); });
    }
};
using sum_of_squares = chunk_sum<float, true>;
using sum_doubles = chunk_sum<double, false>;

// ---- element bodies (one element, or one column, per call) -----------------------------------

//! pre += bias (per column); act = GELU(pre).
template <class S>
struct bias_gelu_forward {
    std::int64_t f;
    const float* bias;
    S *pre, *act;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const
    {
        const S x = S(float(pre[e]) + bias[e % f]);
        pre[e] = x;
        act[e] = S(gelu(float(x)));  // GELU of the stored pre-activation: what the backward sees
    }
};

//! g *= GELU'(pre).
template <class S>
struct gelu_backward {
    const S* pre;
    S* g;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const { g[e] = S(float(g[e]) * gelu_grad(float(pre[e]))); }
};

//! y += bias (per column) + residual (when not null).
template <class S>
struct add_bias_residual {
    std::int64_t d;
    const float* bias;
    const S* residual;
    S* y;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const
    {
        y[e] = S(float(y[e]) + (bias[e % d] + (residual ? float(residual[e]) : 0.0f)));
    }
};

//! Column c: out[c] += sum over the n rows of x[., c]. With `xhat` (LayerNorm's input, mean and
//! 1/std), out[c] += sum dy * (x - mean) * rstd instead (the gain's gradient).
template <class S>
struct column_sum {
    std::int64_t n, d;
    const S* x;
    float* out;
    TPIPE_HOST_DEVICE void operator()(std::int64_t c) const
    {
        float s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += float(x[i * d + c]);
        out[c] += s;
    }
};
template <class S>
struct layernorm_gain_grad {
    std::int64_t n, d;
    const S *dy, *x;
    const float *mean, *rstd;
    float* dg;
    TPIPE_HOST_DEVICE void operator()(std::int64_t c) const
    {
        float s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += float(dy[i * d + c]) * ((float(x[i * d + c]) - mean[i]) * rstd[i]);
        dg[c] += s;
    }
};

//! Token + position embedding of a unit: rows [row_begin, row_begin + rows) and tokens
//! [t0, t0 + s) of a batch of inputs [B, Lb]. x is [rows * s, d]. A token id outside [0, vocab)
//! gives NaN (callers check the batch on the host first).
struct unit_tokens {
    std::int64_t row_begin, s, t0, Lb, d, vocab;
    const std::int32_t* inputs;
    TPIPE_HOST_DEVICE std::int32_t token(std::int64_t tk) const
    {
        return inputs[(row_begin + tk / s) * Lb + t0 + tk % s];
    }
    TPIPE_HOST_DEVICE std::int64_t position(std::int64_t tk) const { return t0 + tk % s; }
};
template <class S>
struct embedding_forward {
    unit_tokens u;
    const float *wte, *wpe;
    S* x;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const
    {
        const std::int64_t tk = e / u.d, c = e % u.d;
        const std::int32_t tok = u.token(tk);
        x[e] = S(tok < 0 || tok >= u.vocab ? NAN : wte[tok * u.d + c] + wpe[u.position(tk) * u.d + c]);
    }
};
//! Its backward: scatter-adds dx into the token and position embeddings' gradients.
template <class S>
struct embedding_backward {
    unit_tokens u;
    const S* dx;
    float *gte, *gpe;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const
    {
        const std::int64_t tk = e / u.d, c = e % u.d;
        const std::int32_t tok = u.token(tk);
        if (tok < 0 || tok >= u.vocab) return;
        accumulate(gte + tok * u.d + c, float(dx[e]));
        accumulate(gpe + u.position(tk) * u.d + c, float(dx[e]));
    }
};

//! The slice's keys and values from qkv [rows * s, 3d] into the caches [rows, L, d] at [t0, t0+s)
//! (to_cache), or the completed K/V gradients from the caches' accumulators into dqkv (from_cache).
//! Q: qkv's element type; C: the caches' (float for the K/V gradient accumulators).
template <class Q, class C>
struct kv_cache_copy {
    std::int64_t s, t0, L, d;
    bool to_cache;
    Q* qkv;
    C *k, *v;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const
    {
        const std::int64_t tk = e / d, c = e % d, r = tk / s, i = tk % s;
        Q* q = qkv + tk * 3 * d;
        const std::int64_t at = (r * L + t0 + i) * d + c;
        if (to_cache) {
            k[at] = C(float(q[d + c]));
            v[at] = C(float(q[2 * d + c]));
        } else {
            q[d + c] = Q(float(k[at]));
            q[2 * d + c] = Q(float(v[at]));
        }
    }
};

//! to[e] = from[e] in the storage type (the weights' copy the GEMMs read).
template <class S>
struct convert {
    const float* from;
    S* to;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const { to[e] = S(from[e]); }
};

//! AdamW on one parameter. The clip factor comes from the global squared norm, read on the
//! device (no round trip to the host): clip = max_norm / norm when norm exceeds max_norm > 0.
struct adamw_coefficients {
    float beta1, beta2, eps, shrink, step_size, rbc2;  // shrink = lr * weight_decay
    double max_norm;
};
struct adamw_update {
    adamw_coefficients k;
    const double* sum_sq;
    const float* grad;
    const unsigned char* decay;
    float *value, *m, *v;
    TPIPE_HOST_DEVICE void operator()(std::int64_t e) const
    {
        const double norm = sqrt(*sum_sq);
        const float clip = k.max_norm > 0 && norm > k.max_norm ? float(k.max_norm / norm) : 1.0f;
        const float g = grad[e] * clip;
        const float mi = k.beta1 * m[e] + (1.0f - k.beta1) * g;
        const float vi = k.beta2 * v[e] + (1.0f - k.beta2) * g * g;
        m[e] = mi;
        v[e] = vi;
        const float w = value[e] - k.shrink * float(decay[e]) * value[e];
        value[e] = w - k.step_size * mi / (sqrtf(vi) * k.rbc2 + k.eps);
    }
};

} // namespace body

// ---- launchers: shape checks, then the executor --------------------------------------------
namespace detail {
template <class T>
std::int64_t dim(const tensor<T>& t, int i)
{
    return t.shape.dim[static_cast<std::size_t>(i)];
}
//! The [n, d] of a matrix operand (refuses another rank).
template <class T>
void expect_matrix(const char* kernel, const char* name, const tensor<T>& t, memory where)
{
    if (t.shape.rank != 2)
        detail::refuse_tensor(kernel, name, "has shape " + t.shape.str() + ", the kernel needs a matrix [rows, columns]");
    expect_shape(kernel, name, t, t.shape, where);
}
} // namespace detail

//! y = LN(x) * g + b over x [n, d]; mean and rstd [n] are kept for the backward.
template <class Ex, class S>
void layernorm_forward(Ex& ex, tensor<const std::type_identity_t<S>> x, tensor<const float> g, tensor<const float> b,
                       double eps, tensor<S> y, tensor<float> mean, tensor<float> rstd)
{
    constexpr const char* k = "layernorm_forward";
    detail::expect_matrix(k, "x", x, ex.where);
    const std::int64_t n = detail::dim(x, 0), d = detail::dim(x, 1);
    expect_shape(k, "g", g, {d}, ex.where);
    expect_shape(k, "b", b, {d}, ex.where);
    expect_shape(k, "y", y, {n, d}, ex.where);
    expect_shape(k, "mean", mean, {n}, ex.where);
    expect_shape(k, "rstd", rstd, {n}, ex.where);
    ex.rows(n, d, body::layernorm_forward<S>{d, float(eps), x.data, g.data, b.data, y.data, mean.data, rstd.data});
}

namespace detail {
//! The backward's gradient dy [n, d] and what the forward kept (x [n, d], mean and rstd [n]).
template <class Ex, class S>
std::pair<std::int64_t, std::int64_t> expect_layernorm_saved(const char* k, Ex& ex, const tensor<const S>& dy,
                                                             const tensor<const S>& x,
                                                             const tensor<const float>& mean,
                                                             const tensor<const float>& rstd)
{
    expect_matrix(k, "dy", dy, ex.where);
    const std::int64_t n = dim(dy, 0), d = dim(dy, 1);
    expect_shape(k, "x", x, {n, d}, ex.where);
    expect_shape(k, "mean", mean, {n}, ex.where);
    expect_shape(k, "rstd", rstd, {n}, ex.where);
    return {n, d};
}
} // namespace detail

//! dx += the LayerNorm backward of dy [n, d].
template <class Ex, class S>
void layernorm_backward(Ex& ex, tensor<const std::type_identity_t<S>> dy, tensor<const std::type_identity_t<S>> x,
                        tensor<const float> mean, tensor<const float> rstd, tensor<const float> g, tensor<S> dx)
{
    constexpr const char* k = "layernorm_backward";
    const auto [n, d] = detail::expect_layernorm_saved(k, ex, dy, x, mean, rstd);
    expect_shape(k, "g", g, {d}, ex.where);
    expect_shape(k, "dx", dx, {n, d}, ex.where);
    ex.rows(n, d, body::layernorm_backward<S>{d, dy.data, x.data, mean.data, rstd.data, g.data, dx.data});
}

//! dg += sum_rows dy * xhat, db += sum_rows dy.
template <class Ex, class S>
void layernorm_param_grad(Ex& ex, tensor<const S> dy, tensor<const std::type_identity_t<S>> x, tensor<const float> mean,
                          tensor<const float> rstd, tensor<float> dg, tensor<float> db)
{
    constexpr const char* k = "layernorm_param_grad";
    const auto [n, d] = detail::expect_layernorm_saved(k, ex, dy, x, mean, rstd);
    expect_shape(k, "dg", dg, {d}, ex.where);
    expect_shape(k, "db", db, {d}, ex.where);
    ex.elements(d, body::layernorm_gain_grad<S>{n, d, dy.data, x.data, mean.data, rstd.data, dg.data});
    ex.elements(d, body::column_sum<S>{n, d, dy.data, db.data});
}

//! pre [n, f] += bias; act = GELU(pre).
template <class Ex, class S>
void bias_gelu_forward(Ex& ex, tensor<const float> bias, tensor<S> pre, tensor<std::type_identity_t<S>> act)
{
    constexpr const char* k = "bias_gelu_forward";
    detail::expect_matrix(k, "pre", pre, ex.where);
    const std::int64_t n = detail::dim(pre, 0), f = detail::dim(pre, 1);
    expect_shape(k, "bias", bias, {f}, ex.where);
    expect_shape(k, "act", act, {n, f}, ex.where);
    ex.elements(n * f, body::bias_gelu_forward<S>{f, bias.data, pre.data, act.data});
}

//! g *= GELU'(pre), both [n, f].
template <class Ex, class S>
void gelu_backward(Ex& ex, tensor<const std::type_identity_t<S>> pre, tensor<S> g)
{
    constexpr const char* k = "gelu_backward";
    detail::expect_matrix(k, "pre", pre, ex.where);
    expect_shape(k, "g", g, pre.shape, ex.where);
    ex.elements(pre.count(), body::gelu_backward<S>{pre.data, g.data});
}

//! y [n, d] += bias + residual (residual may be a null view of shape [n, d]: bias only).
template <class Ex, class S>
void add_bias_residual(Ex& ex, tensor<const float> bias, tensor<const std::type_identity_t<S>> residual, tensor<S> y)
{
    constexpr const char* k = "add_bias_residual";
    detail::expect_matrix(k, "y", y, ex.where);
    const std::int64_t n = detail::dim(y, 0), d = detail::dim(y, 1);
    expect_shape(k, "bias", bias, {d}, ex.where);
    if (residual.data || residual.shape.rank) expect_shape(k, "residual", residual, {n, d}, ex.where);
    ex.elements(n * d, body::add_bias_residual<S>{d, bias.data, residual.data, y.data});
}

//! out [d] += column sums of x [n, d].
template <class Ex, class S>
void column_sum(Ex& ex, tensor<const S> x, tensor<float> out)
{
    constexpr const char* k = "column_sum";
    detail::expect_matrix(k, "x", x, ex.where);
    expect_shape(k, "out", out, {detail::dim(x, 1)}, ex.where);
    ex.elements(detail::dim(x, 1), body::column_sum<S>{detail::dim(x, 0), detail::dim(x, 1), x.data, out.data});
}

//! logits [n, V] become (softmax - onehot(targets)) * scale; row_loss [n] gets each row's CE.
template <class Ex, class S>
void softmax_cross_entropy(Ex& ex, tensor<const std::int32_t> targets, float scale, tensor<S> logits,
                           tensor<double> row_loss)
{
    constexpr const char* k = "softmax_cross_entropy";
    detail::expect_matrix(k, "logits", logits, ex.where);
    const std::int64_t n = detail::dim(logits, 0), V = detail::dim(logits, 1);
    expect_shape(k, "targets", targets, {n}, ex.where);
    expect_shape(k, "row_loss", row_loss, {n}, ex.where);
    ex.rows(n, V, body::softmax_cross_entropy<S>{V, scale, targets.data, logits.data, row_loss.data});
}

//! Scores [rows*heads, s, t0+s] become the causal attention probabilities (scaled by `scale`).
template <class Ex, class S>
void causal_softmax_forward(Ex& ex, std::int64_t t0, float scale, tensor<S> p)
{
    constexpr const char* k = "causal_softmax_forward";
    expect_size(k, "t0", t0, 0);
    if (p.shape.rank != 3) detail::refuse_tensor(k, "p", "has shape " + p.shape.str() + ", the kernel needs [rows*heads, s, t0+s]");
    const std::int64_t s = detail::dim(p, 1);
    expect_shape(k, "p", p, {detail::dim(p, 0), s, t0 + s}, ex.where);
    ex.rows(detail::dim(p, 0) * s, t0 + s, body::causal_softmax_forward<S>{s, t0, scale, p.data});
}

//! dp [rows*heads, s, t0+s] (gradient of the probabilities) becomes the scores' gradient.
template <class Ex, class S>
void causal_softmax_backward(Ex& ex, std::int64_t t0, float scale, tensor<const std::type_identity_t<S>> p, tensor<S> dp)
{
    constexpr const char* k = "causal_softmax_backward";
    expect_size(k, "t0", t0, 0);
    if (p.shape.rank != 3) detail::refuse_tensor(k, "p", "has shape " + p.shape.str() + ", the kernel needs [rows*heads, s, t0+s]");
    const std::int64_t s = detail::dim(p, 1);
    expect_shape(k, "p", p, {detail::dim(p, 0), s, t0 + s}, ex.where);
    expect_shape(k, "dp", dp, p.shape, ex.where);
    ex.rows(detail::dim(p, 0) * s, t0 + s, body::causal_softmax_backward<S>{s, t0, scale, p.data, dp.data});
}

//! The embedding of a unit (rows [row_begin, row_begin + rows), tokens [t0, t0 + s) of inputs
//! [B, Lb]) into x [rows * s, d].
struct unit_extent {
    std::int64_t row_begin, rows, t0, s;
};
namespace detail {
template <class Ex>
body::unit_tokens check_embedding(const char* k, Ex& ex, const unit_extent& u, tensor<const std::int32_t> inputs,
                                  const tensor<const float>& wte, const tensor<const float>& wpe, std::int64_t d,
                                  std::int64_t xrows)
{
    detail::expect_matrix(k, "inputs", inputs, ex.where);
    detail::expect_matrix(k, "wte", wte, ex.where);
    detail::expect_matrix(k, "wpe", wpe, ex.where);
    const std::int64_t B = dim(inputs, 0), Lb = dim(inputs, 1);
    if (u.row_begin < 0 || u.rows < 1 || u.row_begin + u.rows > B || u.t0 < 0 || u.s < 1 || u.t0 + u.s > Lb)
        throw tpipe::invalid_argument(std::string("gpt::cuda::") + k + ": unit rows [" + std::to_string(u.row_begin) +
                                      ", " + std::to_string(u.row_begin + u.rows) + ") tokens [" + std::to_string(u.t0) +
                                      ", " + std::to_string(u.t0 + u.s) + ") do not fit the batch " +
                                      inputs.shape.str());
    expect_shape(k, "wte", wte, {dim(wte, 0), d}, ex.where);
    if (dim(wpe, 0) < Lb)
        detail::refuse_tensor(k, "wpe", "has shape " + wpe.shape.str() + ", the batch needs at least " +
                                            std::to_string(Lb) + " positions");
    expect_shape(k, "wpe", wpe, {dim(wpe, 0), d}, ex.where);
    if (xrows != u.rows * u.s)
        throw tpipe::invalid_argument(std::string("gpt::cuda::") + k + ": the unit has " + std::to_string(u.rows * u.s) +
                                      " tokens, the activation " + std::to_string(xrows) + " rows");
    return {u.row_begin, u.s, u.t0, Lb, d, dim(wte, 0), inputs.data};
}
} // namespace detail

template <class Ex, class S>
void embedding_forward(Ex& ex, const unit_extent& u, tensor<const std::int32_t> inputs, tensor<const float> wte,
                       tensor<const float> wpe, tensor<S> x)
{
    constexpr const char* k = "embedding_forward";
    detail::expect_matrix(k, "x", x, ex.where);
    const auto t = detail::check_embedding(k, ex, u, inputs, wte, wpe, detail::dim(x, 1), detail::dim(x, 0));
    ex.elements(x.count(), body::embedding_forward<S>{t, wte.data, wpe.data, x.data});
}

//! gte [vocab, d] and gpe [positions, d] += the scatter of dx [rows * s, d].
template <class Ex, class S>
void embedding_backward(Ex& ex, const unit_extent& u, tensor<const std::int32_t> inputs, tensor<const S> dx,
                        tensor<float> gte, tensor<float> gpe)
{
    constexpr const char* k = "embedding_backward";
    detail::expect_matrix(k, "dx", dx, ex.where);
    const auto t = detail::check_embedding(k, ex, u, inputs, gte, gpe, detail::dim(dx, 1), detail::dim(dx, 0));
    ex.elements(dx.count(), body::embedding_backward<S>{t, dx.data, gte.data, gpe.data});
}

//! Keys and values of qkv [rows * s, 3d] into the caches k, v [rows, L, d] at tokens [t0, t0+s)
//! (to_cache), or the caches' contents there into qkv's K and V columns (!to_cache).
template <class Ex, class Q, class C>
void kv_cache_copy(Ex& ex, std::int64_t t0, bool to_cache, tensor<Q> qkv, tensor<C> k, tensor<std::type_identity_t<C>> v)
{
    constexpr const char* kn = "kv_cache_copy";
    if (k.shape.rank != 3) detail::refuse_tensor(kn, "k", "has shape " + k.shape.str() + ", the kernel needs [rows, L, d]");
    const std::int64_t rows = detail::dim(k, 0), L = detail::dim(k, 1), d = detail::dim(k, 2);
    expect_shape(kn, "k", k, k.shape, ex.where);
    expect_shape(kn, "v", v, k.shape, ex.where);
    detail::expect_matrix(kn, "qkv", qkv, ex.where);
    const std::int64_t n = detail::dim(qkv, 0);
    if (n % rows != 0 || t0 < 0 || t0 + n / rows > L)
        throw tpipe::invalid_argument(std::string("gpt::cuda::") + kn + ": qkv " + qkv.shape.str() +
                                      " is not a slice of the cache " + k.shape.str() + " at token " + std::to_string(t0));
    expect_shape(kn, "qkv", qkv, {n, 3 * d}, ex.where);
    ex.elements(n * d, body::kv_cache_copy<Q, C>{n / rows, t0, L, d, to_cache, qkv.data, k.data, v.data});
}

namespace detail {
template <bool Square, class Ex, class T>
void chunk_sum(const char* k, Ex& ex, tensor<const T> x, tensor<double> out)
{
    if (x.shape.rank != 1) detail::refuse_tensor(k, "x", "has shape " + x.shape.str() + ", the kernel needs a vector");
    expect_shape(k, "x", x, x.shape, ex.where);
    expect_shape(k, "out", out, {1}, ex.where);
    constexpr std::int64_t chunk = 8192;
    const std::int64_t n = x.count();
    ex.rows((n + chunk - 1) / chunk, chunk, body::chunk_sum<T, Square>{n, chunk, x.data, out.data});
}
} // namespace detail

//! out (one double) += the sum of squares of x [count], in double.
template <class Ex>
void sum_of_squares(Ex& ex, tensor<const float> x, tensor<double> out)
{
    detail::chunk_sum<true>("sum_of_squares", ex, x, out);
}
//! out (one double) += the sum of x [count] (the units' per-row losses).
template <class Ex>
void sum_doubles(Ex& ex, tensor<const double> x, tensor<double> out)
{
    detail::chunk_sum<false>("sum_doubles", ex, x, out);
}

//! to [count] = from [count] in to's element type.
template <class Ex, class S>
void convert(Ex& ex, tensor<const float> from, tensor<S> to)
{
    constexpr const char* k = "convert";
    if (from.shape.rank != 1) detail::refuse_tensor(k, "from", "has shape " + from.shape.str() + ", the kernel needs a vector");
    expect_shape(k, "from", from, from.shape, ex.where);
    expect_shape(k, "to", to, from.shape, ex.where);
    ex.elements(from.count(), body::convert<S>{from.data, to.data});
}

//! One AdamW update of value, m, v [count] from grad (clipped by the norm sqrt(*sum_sq)).
template <class Ex>
void adamw_update(Ex& ex, const body::adamw_coefficients& c, tensor<const double> sum_sq, tensor<const float> grad,
                  tensor<const unsigned char> decay, tensor<float> value, tensor<float> m, tensor<float> v)
{
    constexpr const char* k = "adamw_update";
    if (grad.shape.rank != 1) detail::refuse_tensor(k, "grad", "has shape " + grad.shape.str() + ", the kernel needs a vector");
    expect_shape(k, "grad", grad, grad.shape, ex.where);
    expect_shape(k, "sum_sq", sum_sq, {1}, ex.where);
    expect_shape(k, "decay", decay, grad.shape, ex.where);
    expect_shape(k, "value", value, grad.shape, ex.where);
    expect_shape(k, "m", m, grad.shape, ex.where);
    expect_shape(k, "v", v, grad.shape, ex.where);
    ex.elements(grad.count(), body::adamw_update{c, sum_sq.data, grad.data, decay.data, value.data, m.data, v.data});
}

} // namespace gpt::cuda
