#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "gpt/kernels.hpp"

namespace {

// Read before any GEMM: the GPT's set-up writes the variable itself when it re-selects kernels.
const bool user_chose_kernels = std::getenv("OPENBLAS_CORETYPE") != nullptr;

template <class T>
void check_gemm(std::int64_t m, std::int64_t n, std::int64_t k, bool ta, bool tb, bool acc, gpt::thread_pool* pool)
{
    std::vector<T> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
    std::vector<T> c(static_cast<std::size_t>(m * (n + 3))), ref;
    std::uint64_t s = 12345 + static_cast<std::uint64_t>(m * 131 + n * 17 + k);
    auto rnd = [&] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<T>(static_cast<double>(s >> 40) / double(1ULL << 24) - 0.5);
    };
    for (auto& x : a) x = rnd();
    for (auto& x : b) x = rnd();
    for (auto& x : c) x = rnd();
    ref = c;
    const gpt::mat<T> A = ta ? gpt::mat<T>{a.data(), 1, m} : gpt::mat<T>{a.data(), k, 1};
    const gpt::mat<T> B = tb ? gpt::mat<T>{b.data(), 1, k} : gpt::mat<T>{b.data(), n, 1};
    const std::int64_t ldc = n + 3;
    if (pool)
        gpt::gemm<T>(*pool, m, n, k, A, B, c.data(), ldc, acc);
    else
        gpt::gemm<T>(m, n, k, A, B, c.data(), ldc, acc);
    gpt::gemm_naive<T>(m, n, k, A, B, ref.data(), ldc, acc);
    double worst = 0;
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < ldc; ++j) {
            const double d = std::abs(double(c[i * ldc + j]) - double(ref[i * ldc + j]));
            if (j >= n) REQUIRE(d == 0.0);  // padding columns untouched
            worst = std::max(worst, d);
        }
    const double tol = (sizeof(T) == 4 ? 1e-5 : 1e-13) * double(k + 1);
    INFO("m=" << m << " n=" << n << " k=" << k << " ta=" << ta << " tb=" << tb << " acc=" << acc);
    REQUIRE(worst <= tol);
}

} // namespace

TEMPLATE_TEST_CASE("BLAS gemm equals the triple loop", "[gpt][kernels]", float, double)
{
    gpt::thread_pool pool(2);
    for (auto [m, n, k] : {std::tuple{1, 1, 1}, {5, 7, 3}, {6, 16, 8}, {13, 33, 300}, {130, 40, 17}, {7, 2100, 9},
                           {200, 70, 520}, {64, 64, 64}})
        for (bool ta : {false, true})
            for (bool tb : {false, true})
                for (bool acc : {false, true}) {
                    check_gemm<TestType>(m, n, k, ta, tb, acc, nullptr);
                    check_gemm<TestType>(m, n, k, ta, tb, acc, &pool);
                }
}

TEST_CASE("a pool's gemm gives the same bits on 1, 2 or 3 threads", "[gpt][kernels]")
{
    // Elastic training re-plans a stage onto more threads and must not change a bit.
    gpt::thread_pool p1(1), p2(2), p3(3);
    for (auto [m, n, k] : {std::array<std::int64_t, 3>{512, 128, 128}, {128, 384, 512}, {200, 72, 300}, {64, 1024, 128}}) {
        std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(k * n));
        for (std::size_t i = 0; i < a.size(); ++i) a[i] = float(std::sin(0.37 * double(i)));
        for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(std::cos(0.11 * double(i)));
        std::vector<float> c1(static_cast<std::size_t>(m * n)), c2(c1.size()), c3(c1.size());
        gpt::gemm<float>(p1, m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c1.data(), n, false);
        gpt::gemm<float>(p2, m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c2.data(), n, false);
        gpt::gemm<float>(p3, m, n, k, {a.data(), k, 1}, {b.data(), n, 1}, c3.data(), n, false);
        INFO("m " << m << " n " << n << " k " << k);
        CHECK(c1 == c2);
        CHECK(c1 == c3);
    }
}

TEST_CASE("OpenBLAS runs kernels as wide as the CPU's instructions", "[gpt][kernels]")
{
    // OpenBLAS names cores by model number; a core newer than the release once ran the SSE3
    // (Prescott) kernels at 1/4 of the speed (Emerald Rapids), another the AVX2 ones (Zen 4).
    const std::string core = gpt::blas_core();
    INFO("OpenBLAS kernel set: " << core);
    if (user_chose_kernels) {
        WARN("OPENBLAS_CORETYPE is set: the user's choice (" << core << ") is kept, not checked");
        return;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                        __builtin_cpu_supports("avx512cd");
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512_set = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
    if (avx512) CHECK(avx512_set);
    else if (avx2) CHECK((avx512_set || core == "Haswell" || core == "Zen"));
#endif
}

TEST_CASE("thread pool runs every task once and rethrows", "[gpt][kernels]")
{
    gpt::thread_pool pool(2);
    for (int round = 0; round < 200; ++round) {
        std::vector<int> hit(37, 0);
        pool.run(37, [&](int i) { hit[static_cast<std::size_t>(i)] += 1; });
        for (int h : hit) REQUIRE(h == 1);
    }
    REQUIRE_THROWS_AS(pool.run(4, [](int i) {
        if (i == 2) throw std::runtime_error("boom");
    }), std::runtime_error);
}

TEST_CASE("gemm refuses an operand without a unit stride", "[gpt][kernels]")
{
    std::vector<float> a(64, 1.0f), c(16);
    REQUIRE_THROWS_AS(gpt::gemm<float>(4, 4, 4, {a.data(), 8, 2}, {a.data(), 4, 1}, c.data(), 4, false),
                      std::invalid_argument);
}

TEST_CASE("float row kernels equal their formulas in double", "[gpt][kernels]")
{
    // The float path uses a polynomial exp; the softmax, its cross-entropy and the GELU must
    // stay within float rounding of the exact formulas, including far into the tails.
    gpt::thread_pool pool(2);
    const std::int64_t n = 37, V = 300;
    std::vector<float> z(static_cast<std::size_t>(n * V));
    std::vector<std::int32_t> tgt(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
        tgt[static_cast<std::size_t>(i)] = static_cast<std::int32_t>((i * 97) % V);
        for (std::int64_t c = 0; c < V; ++c)
            z[static_cast<std::size_t>(i * V + c)] = float(30.0 * std::sin(0.7 * double(i * V + c)) * double(i % 4));
    }
    auto seed = z;
    const float scale = 0.25f;
    const double loss = gpt::softmax_cross_entropy(pool, n, V, tgt.data(), scale, seed.data());
    double ref_loss = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const float* zi = z.data() + i * V;
        double mx = zi[0], sum = 0;
        for (std::int64_t c = 0; c < V; ++c) mx = std::max(mx, double(zi[c]));
        for (std::int64_t c = 0; c < V; ++c) sum += std::exp(double(zi[c]) - mx);
        ref_loss += std::log(sum) + mx - double(zi[tgt[static_cast<std::size_t>(i)]]);
        for (std::int64_t c = 0; c < V; ++c) {
            const double g = scale * (std::exp(double(zi[c]) - mx) / sum - (c == tgt[static_cast<std::size_t>(i)]));
            REQUIRE(std::abs(double(seed[static_cast<std::size_t>(i * V + c)]) - g) <= 1e-6 * scale);
        }
    }
    REQUIRE(std::abs(loss - ref_loss) <= 1e-5 * std::abs(ref_loss));

    const std::int64_t F = 64;
    std::vector<float> pre(static_cast<std::size_t>(n * F)), act(pre.size()), bias(static_cast<std::size_t>(F));
    for (std::size_t i = 0; i < pre.size(); ++i) pre[i] = float(12.0 * std::sin(1.3 * double(i)));
    for (std::size_t c = 0; c < bias.size(); ++c) bias[c] = 0.01f * float(c);
    const auto x0 = pre;
    gpt::bias_gelu_forward(pool, n, F, bias.data(), pre.data(), act.data());
    for (std::size_t i = 0; i < pre.size(); ++i) {
        const double x = double(x0[i]) + double(bias[i % bias.size()]);
        const double y = 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
        REQUIRE(std::abs(double(act[i]) - y) <= 1e-6 * std::max(1.0, std::abs(y)));
    }
}
