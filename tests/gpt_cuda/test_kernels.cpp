// The CUDA GPT's kernel bodies, run on the host by the serial executor, equal the CPU GPT's
// kernels (gpt/kernels.hpp) on random inputs, in float, within 1e-5 relative. These are the
// bodies the device kernels run (src/kernels.cu instantiates the same structs), so this is the
// part of the CUDA GPT's arithmetic that is checked without a GPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gpt/kernels.hpp"
#include "gpt_cuda/host_backend.hpp"
#include "gpt_cuda/serial.hpp"
#include "../gpt/common.hpp"

namespace {

using gpt::cuda::host_view;
using gpt::cuda::shape;
using gpt_test::rel_err;

constexpr double tol = 1e-5;

std::vector<float> random_values(std::size_t n, std::uint64_t seed, float scale = 1.0f, float offset = 0.0f)
{
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = offset + scale * dist(rng);
    return v;
}

template <class T>
gpt::cuda::tensor<T> view(std::vector<T>& v, shape s)
{
    return host_view(v.data(), s, static_cast<std::int64_t>(v.size()));
}
template <class T>
gpt::cuda::tensor<const T> cview(const std::vector<T>& v, shape s)
{
    return host_view(v.data(), s, static_cast<std::int64_t>(v.size()));
}

gpt::cuda::serial_executor ex;

} // namespace

TEST_CASE("LayerNorm forward, backward and parameter gradients equal the CPU GPT's", "[gpt_cuda][kernels]")
{
    gpt::thread_pool pool(1);
    for (auto [n, d] : {std::pair<std::int64_t, std::int64_t>{7, 37}, {1, 1}, {33, 256}}) {
        const auto x = random_values(n * d, 1, 2.0f, 0.5f), g = random_values(d, 2, 0.3f, 1.0f),
                   b = random_values(d, 3), dy = random_values(n * d, 4), dx0 = random_values(n * d, 5);
        std::vector<float> y(n * d), mean(n), rstd(n), y_cpu(n * d), mean_cpu(n), rstd_cpu(n);
        gpt::layernorm_forward(pool, n, d, x.data(), g.data(), b.data(), 1e-5, y_cpu.data(), mean_cpu.data(),
                               rstd_cpu.data());
        gpt::cuda::layernorm_forward(ex, cview(x, {n, d}), cview(g, {d}), cview(b, {d}), 1e-5, view(y, {n, d}),
                                     view(mean, {n}), view(rstd, {n}));
        CHECK(rel_err(y, y_cpu) < tol);
        CHECK(rel_err(mean, mean_cpu) < tol);
        CHECK(rel_err(rstd, rstd_cpu) < tol);

        auto dx = dx0, dx_cpu = dx0;  // both accumulate into the same starting gradient
        gpt::layernorm_backward(pool, n, d, dy.data(), x.data(), mean_cpu.data(), rstd_cpu.data(), g.data(),
                                dx_cpu.data());
        gpt::cuda::layernorm_backward(ex, cview(dy, {n, d}), cview(x, {n, d}), cview(mean_cpu, {n}),
                                      cview(rstd_cpu, {n}), cview(g, {d}), view(dx, {n, d}));
        CHECK(rel_err(dx, dx_cpu) < tol);

        auto dg = random_values(d, 6), db = random_values(d, 7);
        auto dg_cpu = dg, db_cpu = db;
        gpt::layernorm_param_grad(n, d, dy.data(), x.data(), mean_cpu.data(), rstd_cpu.data(), dg_cpu.data(),
                                  db_cpu.data());
        gpt::cuda::layernorm_param_grad(ex, cview(dy, {n, d}), cview(x, {n, d}), cview(mean_cpu, {n}),
                                        cview(rstd_cpu, {n}), view(dg, {d}), view(db, {d}));
        CHECK(rel_err(dg, dg_cpu) < tol);
        CHECK(rel_err(db, db_cpu) < tol);
    }
}

TEST_CASE("bias + GELU forward and backward, bias + residual and column sums equal the CPU GPT's",
          "[gpt_cuda][kernels]")
{
    gpt::thread_pool pool(1);
    const std::int64_t n = 9, f = 70;
    // Wide enough to reach GELU's saturated tails (|x| > 5) as well as its middle.
    const auto pre0 = random_values(n * f, 11, 3.0f), bias = random_values(f, 12);
    auto pre = pre0, pre_cpu = pre0;
    std::vector<float> act(n * f), act_cpu(n * f);
    gpt::bias_gelu_forward(pool, n, f, bias.data(), pre_cpu.data(), act_cpu.data());
    gpt::cuda::bias_gelu_forward(ex, cview(bias, {f}), view(pre, {n, f}), view(act, {n, f}));
    CHECK(rel_err(pre, pre_cpu) < tol);
    CHECK(rel_err(act, act_cpu) < tol);

    auto g = random_values(n * f, 13), g_cpu = g;
    gpt::gelu_backward(pool, n * f, pre_cpu.data(), g_cpu.data());
    gpt::cuda::gelu_backward(ex, cview(pre_cpu, {n, f}), view(g, {n, f}));
    CHECK(rel_err(g, g_cpu) < tol);

    const auto residual = random_values(n * f, 14);
    auto y = random_values(n * f, 15), y_cpu = y, y2 = y, y2_cpu = y;
    gpt::add_bias_residual(pool, n, f, bias.data(), residual.data(), y_cpu.data());
    gpt::cuda::add_bias_residual(ex, cview(bias, {f}), cview(residual, {n, f}), view(y, {n, f}));
    CHECK(rel_err(y, y_cpu) < tol);
    gpt::add_bias(pool, n, f, bias.data(), y2_cpu.data());
    gpt::cuda::add_bias_residual(ex, cview(bias, {f}), {}, view(y2, {n, f}));
    CHECK(rel_err(y2, y2_cpu) < tol);

    auto out = random_values(f, 16), out_cpu = out;
    gpt::col_sum(n, f, residual.data(), out_cpu.data());
    gpt::cuda::column_sum(ex, cview(residual, {n, f}), view(out, {f}));
    CHECK(rel_err(out, out_cpu) < tol);
}

TEST_CASE("softmax cross-entropy: the seed gradient and the loss equal the CPU GPT's", "[gpt_cuda][kernels]")
{
    gpt::thread_pool pool(1);
    const std::int64_t n = 11, V = 53;
    const auto logits0 = random_values(n * V, 21, 4.0f);
    std::vector<std::int32_t> targets(n);
    for (std::int64_t i = 0; i < n; ++i) targets[i] = static_cast<std::int32_t>((i * 17 + 3) % V);
    const float scale = 1.0f / 37.0f;
    auto z = logits0, z_cpu = logits0;
    const double loss_cpu = gpt::softmax_cross_entropy(pool, n, V, targets.data(), scale, z_cpu.data());
    std::vector<double> row_loss(n, -1.0);
    gpt::cuda::softmax_cross_entropy(ex, cview(targets, {n}), scale, view(z, {n, V}), view(row_loss, {n}));
    double loss = 0;
    for (double l : row_loss) loss += l;
    CHECK(std::abs(loss - loss_cpu) <= tol * std::abs(loss_cpu));
    CHECK(rel_err(z, z_cpu) < tol);

    // A target outside the vocabulary: that row's loss is NaN (never a silently clamped id).
    targets[3] = static_cast<std::int32_t>(V);
    gpt::cuda::softmax_cross_entropy(ex, cview(targets, {n}), scale, view(z, {n, V}), view(row_loss, {n}));
    CHECK(std::isnan(row_loss[3]));
    CHECK_FALSE(std::isnan(row_loss[2]));
}

namespace {
// The CUDA part's attention over a K/V-cached slice, with naive host GEMMs standing in for the
// cuBLAS calls: per (row, head), S = Q K^T over keys [0, t1), the causal softmax body, O = P V;
// backward dP = dO V^T, the softmax backward body, dQ = dS K, dK += dS^T Q, dV += P^T dO.
struct attention_case {
    std::int64_t rows, heads, dh, s, t0, L;
    std::int64_t d() const { return heads * dh; }
    std::int64_t t1() const { return t0 + s; }
};

void attention_forward_by_bodies(const attention_case& a, const std::vector<float>& qkv, const std::vector<float>& k,
                                 const std::vector<float>& v, std::vector<float>& probs, std::vector<float>& out)
{
    const std::int64_t d = a.d(), t1 = a.t1(), ld = 3 * d;
    for (std::int64_t r = 0; r < a.rows; ++r)
        for (std::int64_t h = 0; h < a.heads; ++h) {
            float* P = probs.data() + (r * a.heads + h) * a.s * t1;
            gpt::gemm_naive<float>(a.s, t1, a.dh, {qkv.data() + r * a.s * ld + h * a.dh, ld, 1},
                                   {k.data() + r * a.L * d + h * a.dh, 1, d}, P, t1, false);
        }
    gpt::cuda::causal_softmax_forward(ex, a.t0, 1.0f / std::sqrt(float(a.dh)),
                                      view(probs, {a.rows * a.heads, a.s, t1}));
    for (std::int64_t r = 0; r < a.rows; ++r)
        for (std::int64_t h = 0; h < a.heads; ++h)
            gpt::gemm_naive<float>(a.s, a.dh, t1, {probs.data() + (r * a.heads + h) * a.s * t1, t1, 1},
                                   {v.data() + r * a.L * d + h * a.dh, d, 1}, out.data() + r * a.s * d + h * a.dh, d,
                                   false);
}

void attention_backward_by_bodies(const attention_case& a, const std::vector<float>& qkv, const std::vector<float>& k,
                                  const std::vector<float>& v, const std::vector<float>& probs,
                                  const std::vector<float>& dout, std::vector<float>& dq, std::vector<float>& dk,
                                  std::vector<float>& dv)
{
    const std::int64_t d = a.d(), t1 = a.t1(), ld = 3 * d;
    std::vector<float> dp(probs.size());
    for (std::int64_t r = 0; r < a.rows; ++r)
        for (std::int64_t h = 0; h < a.heads; ++h) {
            const std::int64_t rh = r * a.heads + h;
            const float* dO = dout.data() + r * a.s * d + h * a.dh;
            gpt::gemm_naive<float>(a.s, t1, a.dh, {dO, d, 1}, {v.data() + r * a.L * d + h * a.dh, 1, d},
                                   dp.data() + rh * a.s * t1, t1, false);
            gpt::gemm_naive<float>(t1, a.dh, a.s, {probs.data() + rh * a.s * t1, 1, t1}, {dO, d, 1},
                                   dv.data() + r * a.L * d + h * a.dh, d, true);
        }
    gpt::cuda::causal_softmax_backward(ex, a.t0, 1.0f / std::sqrt(float(a.dh)),
                                       cview(probs, {a.rows * a.heads, a.s, t1}),
                                       view(dp, {a.rows * a.heads, a.s, t1}));
    for (std::int64_t r = 0; r < a.rows; ++r)
        for (std::int64_t h = 0; h < a.heads; ++h) {
            const float* dS = dp.data() + (r * a.heads + h) * a.s * t1;
            gpt::gemm_naive<float>(a.s, a.dh, t1, {dS, t1, 1}, {k.data() + r * a.L * d + h * a.dh, d, 1},
                                   dq.data() + r * a.s * ld + h * a.dh, ld, false);
            gpt::gemm_naive<float>(t1, a.dh, a.s, {dS, 1, t1}, {qkv.data() + r * a.s * ld + h * a.dh, ld, 1},
                                   dk.data() + r * a.L * d + h * a.dh, d, true);
        }
}
} // namespace

TEST_CASE("causal attention over a K/V-cached slice: probabilities, output and gradients equal the CPU GPT's",
          "[gpt_cuda][kernels]")
{
    gpt::thread_pool pool(1);
    // First slice, a middle slice over cached keys, and one longer than the CPU's 64-query block.
    for (attention_case a : {attention_case{2, 3, 4, 5, 0, 12}, attention_case{2, 2, 8, 4, 7, 12},
                             attention_case{1, 2, 4, 70, 10, 80}}) {
        CAPTURE(a.s, a.t0);
        const std::int64_t d = a.d(), n = a.rows * a.s, t1 = a.t1();
        const auto qkv = random_values(n * 3 * d, 31), k = random_values(a.rows * a.L * d, 32),
                   v = random_values(a.rows * a.L * d, 33), dout = random_values(n * d, 34);
        const gpt::attention_shape cpu{a.rows, a.heads, a.dh, a.s, a.t0, a.L};
        std::vector<float> probs(a.rows * a.heads * a.s * t1), out(n * d), probs_cpu(probs.size()), out_cpu(n * d);
        gpt::attention_forward(pool, cpu, qkv.data(), 3 * d, k.data(), v.data(), probs_cpu.data(), out_cpu.data());
        attention_forward_by_bodies(a, qkv, k, v, probs, out);
        CHECK(rel_err(probs, probs_cpu) < tol);
        CHECK(rel_err(out, out_cpu) < tol);

        std::vector<float> dq(n * 3 * d, 0.0f), dq_cpu(n * 3 * d, 0.0f);
        auto dk = random_values(k.size(), 35), dv = random_values(v.size(), 36);
        auto dk_cpu = dk, dv_cpu = dv;
        std::vector<float> scratch;
        gpt::attention_backward(pool, cpu, qkv.data(), 3 * d, k.data(), v.data(), probs_cpu.data(), dout.data(),
                                dq_cpu.data(), dk_cpu.data(), dv_cpu.data(), scratch);
        attention_backward_by_bodies(a, qkv, k, v, probs_cpu, dout, dq, dk, dv);
        CHECK(rel_err(dq, dq_cpu) < tol);
        CHECK(rel_err(dk, dk_cpu) < tol);
        CHECK(rel_err(dv, dv_cpu) < tol);
    }
}

TEST_CASE("the K/V cache copies place a slice's keys and values at its tokens and read the gradients back",
          "[gpt_cuda][kernels]")
{
    const std::int64_t rows = 2, s = 3, t0 = 4, L = 9, d = 5, n = rows * s;
    auto qkv = random_values(n * 3 * d, 41);
    std::vector<float> k(rows * L * d, 0.0f), v(rows * L * d, 0.0f);
    gpt::cuda::kv_cache_copy(ex, t0, true, view(qkv, {n, 3 * d}), view(k, {rows, L, d}), view(v, {rows, L, d}));
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t t = 0; t < L; ++t)
            for (std::int64_t c = 0; c < d; ++c) {
                const bool inside = t >= t0 && t < t0 + s;
                const float* src = qkv.data() + (r * s + (t - t0)) * 3 * d;
                REQUIRE(k[(r * L + t) * d + c] == (inside ? src[d + c] : 0.0f));
                REQUIRE(v[(r * L + t) * d + c] == (inside ? src[2 * d + c] : 0.0f));
            }
    const auto q_before = qkv;
    auto dk = random_values(k.size(), 42), dv = random_values(v.size(), 43);
    gpt::cuda::kv_cache_copy(ex, t0, false, view(qkv, {n, 3 * d}), view(dk, {rows, L, d}), view(dv, {rows, L, d}));
    for (std::int64_t tk = 0; tk < n; ++tk)
        for (std::int64_t c = 0; c < d; ++c) {
            const std::int64_t at = ((tk / s) * L + t0 + tk % s) * d + c;
            REQUIRE(qkv[tk * 3 * d + c] == q_before[tk * 3 * d + c]);  // queries untouched
            REQUIRE(qkv[tk * 3 * d + d + c] == dk[at]);
            REQUIRE(qkv[tk * 3 * d + 2 * d + c] == dv[at]);
        }
}

TEST_CASE("embedding forward and backward equal the CPU part's gather and scatter", "[gpt_cuda][kernels]")
{
    const std::int64_t B = 3, Lb = 7, V = 11, P = 9, d = 6;
    std::vector<std::int32_t> inputs(B * Lb);
    for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<std::int32_t>((i * 5) % 4);  // repeats
    const auto wte = random_values(V * d, 51), wpe = random_values(P * d, 52);
    const gpt::cuda::unit_extent u{1, 2, 2, 4};  // rows [1, 3), tokens [2, 6)
    const std::int64_t n = u.rows * u.s;
    std::vector<float> x(n * d);
    gpt::cuda::embedding_forward(ex, u, cview(inputs, {B, Lb}), cview(wte, {V, d}), cview(wpe, {P, d}),
                                 view(x, {n, d}));
    const auto dx = random_values(n * d, 53);
    auto gte = random_values(V * d, 54), gpe = random_values(P * d, 55);
    auto gte_ref = gte, gpe_ref = gpe;
    gpt::cuda::embedding_backward(ex, u, cview(inputs, {B, Lb}), cview(dx, {n, d}), view(gte, {V, d}),
                                  view(gpe, {P, d}));
    // The CPU part's loops (apps/gpt/src/model.cpp, forward and backward_weight of the first part).
    for (std::int64_t r = 0; r < u.rows; ++r)
        for (std::int64_t i = 0; i < u.s; ++i) {
            const std::int32_t tok = inputs[(u.row_begin + r) * Lb + u.t0 + i];
            for (std::int64_t c = 0; c < d; ++c) {
                REQUIRE(x[(r * u.s + i) * d + c] == wte[tok * d + c] + wpe[(u.t0 + i) * d + c]);
                gte_ref[tok * d + c] += dx[(r * u.s + i) * d + c];
                gpe_ref[(u.t0 + i) * d + c] += dx[(r * u.s + i) * d + c];
            }
        }
    CHECK(rel_err(gte, gte_ref) < tol);
    CHECK(rel_err(gpe, gpe_ref) < tol);
}

TEST_CASE("AdamW with the clip factor taken from the squared norm equals the CPU GPT's update", "[gpt_cuda][kernels]")
{
    const std::int64_t count = 1000;
    const auto grad = random_values(count, 61, 0.2f);
    std::vector<unsigned char> decay(count);
    for (std::int64_t i = 0; i < count; ++i) decay[i] = i % 3 == 0;
    for (double max_norm : {1.0, 0.0, 1e6}) {  // clipped, clipping off, norm below the cap
        CAPTURE(max_norm);
        auto value = random_values(count, 62), m = random_values(count, 63, 0.01f), v = random_values(count, 64, 0.01f);
        for (auto& x : v) x = std::abs(x);
        auto value_cpu = value, m_cpu = m, v_cpu = v;
        std::vector<double> sum_sq{0.0};
        gpt::cuda::sum_of_squares(ex, cview(grad, {count}), view(sum_sq, {1}));
        const double sum_sq_cpu = gpt::sum_of_squares(count, grad.data());
        CHECK(std::abs(sum_sq[0] - sum_sq_cpu) <= 1e-12 * sum_sq_cpu);
        const double norm = std::sqrt(sum_sq_cpu), lr = 3e-3, wd = 0.1, b1 = 0.9, b2 = 0.95, eps = 1e-8;
        const int t = 3;
        const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
        const double clip = max_norm > 0 && norm > max_norm ? max_norm / norm : 1.0;
        REQUIRE((max_norm == 1.0) == (clip < 1.0));  // the cases cover both branches
        const gpt::adamw_coefficients c{lr, b1, b2, eps, wd, clip, lr / bc1, 1 / std::sqrt(bc2)};
        gpt::adamw_update(count, c, grad.data(), decay.data(), value_cpu.data(), m_cpu.data(), v_cpu.data());
        const gpt::cuda::body::adamw_coefficients k{float(b1), float(b2), float(eps), float(lr * wd),
                                                    float(lr / bc1), float(1 / std::sqrt(bc2)), max_norm};
        gpt::cuda::adamw_update(ex, k, cview(sum_sq, {1}), cview(grad, {count}), cview(decay, {count}),
                                view(value, {count}), view(m, {count}), view(v, {count}));
        CHECK(rel_err(value, value_cpu) < tol);
        CHECK(rel_err(m, m_cpu) < tol);
        CHECK(rel_err(v, v_cpu) < tol);
    }
}

TEST_CASE("row-major products as cuBLAS's column-major operands (the host backend's reference GEMM) equal the "
          "triple loop for every transposition; a short leading dimension is refused",
          "[gpt_cuda][kernels]")
{
    gpt::cuda::host_backend::blas blas;
    const std::int64_t m = 5, n = 7, k = 3;
    const auto a = random_values(m * k, 71), b = random_values(k * n, 72);
    for (bool ta : {false, true})
        for (bool tb : {false, true})
            for (bool acc : {false, true}) {
                CAPTURE(ta, tb, acc);
                // A [m x k] stored row-major or as the transpose of a row-major [k x m]; B alike.
                const gpt::mat<float> A = ta ? gpt::mat<float>{a.data(), 1, m} : gpt::mat<float>{a.data(), k, 1};
                const gpt::mat<float> B = tb ? gpt::mat<float>{b.data(), 1, k} : gpt::mat<float>{b.data(), n, 1};
                auto c = random_values(m * (n + 2), 73), c_ref = c;  // ldc = n + 2: padded rows
                blas.gemm(m, n, k, A, B, c.data(), n + 2, acc);
                gpt::gemm_naive<float>(m, n, k, A, B, c_ref.data(), n + 2, acc);
                CHECK(rel_err(c, c_ref) < tol);
            }
    std::vector<float> c(m * n);
    CHECK_THROWS_WITH((blas.gemm<float, float>(m, n, k, {a.data(), 2, 1}, {b.data(), n, 1}, c.data(), n, false)),
                      Catch::Matchers::Contains("operand A has leading dimension 2, cuBLAS needs at least 3"));
    CHECK_THROWS_WITH((blas.gemm<float, float>(m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c.data(), n - 1, false)),
                      Catch::Matchers::Contains("C has leading dimension 6, cuBLAS needs at least 7"));
    CHECK_THROWS_WITH((blas.gemm<float, float>(m, n, k, {a.data(), k, 2}, {b.data(), n, 1}, c.data(), n, false)),
                      Catch::Matchers::Contains("operand A has strides (3, 2); one of them must be 1"));
}
