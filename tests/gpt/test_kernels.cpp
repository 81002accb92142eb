#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "gpt/kernels.hpp"

namespace {

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
