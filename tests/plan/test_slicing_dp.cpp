// The exact slicing planner against exhaustive search, plus its invariances and refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>

#include "../../bench/terapipe_reference_dp.hpp"
#include "brute_force.hpp"
#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/plan/baselines.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/slicing_dp.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

using tpipe::cut_mode;
using tpipe::plan_slices;
using tpipe::slicing_problem;

//! Arbitrary (non-monotone) unit times from a hash of (b, s, c): no structure to exploit.
struct noise_latency {
    std::uint64_t seed = 1;
    bool integer = false;
    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        std::uint64_t x = seed ^ (static_cast<std::uint64_t>(b) * 0x9E3779B97F4A7C15ull) ^
                          (static_cast<std::uint64_t>(s) * 0xC2B2AE3D27D4EB4Full) ^
                          (static_cast<std::uint64_t>(c) * 0x165667B19E3779F9ull);
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        x ^= x >> 29;
        const double u = static_cast<double>(x % 1000003) / 1000003.0;
        // grows with the work so slicing matters, but with large random wiggles
        const double base = 0.2 * static_cast<double>(b * s) + 0.01 * static_cast<double>(b * s * c) / 8.0;
        return integer ? std::floor(base) + static_cast<double>(x % 7) : (base + 3.0 * u) * 1e-3;
    }
};

tpipe::polynomial_latency random_polynomial(std::mt19937_64& rng, bool integer, bool allow_negative_s)
{
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::array<double, 8> k{};
    for (auto& v : k) v = integer ? std::floor(u(rng) * 6) : u(rng) * 1e-3;
    k[0] += integer ? 20 : 5e-3; // a per-unit overhead: slicing is not free
    if (allow_negative_s) {
        // t may fall with s (not monotone), yet stays >= 0 for every s <= 128 tokens
        k[2] = -(integer ? 1.0 : 2e-4) * std::floor(u(rng) * 2 + 1);
        k[0] -= 128 * k[2];
    }
    return tpipe::polynomial_latency(k);
}

template <class M>
void check_against_brute_force(const M& model, int K, std::int64_t L, std::int64_t B, std::int64_t G, cut_mode mode,
                               bool exact_arithmetic)
{
    INFO("K=" << K << " L=" << L << " B=" << B << " G=" << G << " mode=" << (mode == cut_mode::shared ? "shared" : "per"));
    const auto plan = plan_slices(model, slicing_problem{K, L, B, G, mode});
    const auto sch = plan.scheme();
    REQUIRE(sch.units() == static_cast<int>(plan.units()));
    CHECK(plan.objective == Approx(tpipe::pipeline_objective(model, sch, K)).epsilon(1e-12));
    std::int64_t rows = 0;
    for (auto b : plan.microbatches) rows += b;
    CHECK(rows == B);
    for (const auto& s : plan.slices)
        for (auto l : s) CHECK(l % G == 0);
    if (mode == cut_mode::shared) {
        CHECK(plan.shared_cut());
        const auto ref = tpipe::test::brute_shared(model, K, L, B, G);
        if (exact_arithmetic) {
            CHECK(plan.objective == ref.objective);
            CHECK(plan.t_max == ref.t_max);
            CHECK(plan.microbatches == ref.microbatches);
            CHECK(plan.slices == ref.slices);
        } else {
            CHECK(plan.objective == Approx(ref.objective).epsilon(1e-9));
        }
    } else {
        const auto ref = tpipe::test::brute_per_microbatch(model, K, L, B, G);
        if (exact_arithmetic) {
            CHECK(plan.objective == ref.objective);
            CHECK(plan.t_max == ref.t_max);
            CHECK(plan.units() == ref.units);
        } else {
            CHECK(plan.objective == Approx(ref.objective).epsilon(1e-9));
        }
    }
}

} // namespace

TEST_CASE("slicing DP equals exhaustive search on random models", "[plan][dp]")
{
    std::mt19937_64 rng(20260130);
    std::uniform_int_distribution<int> pick_k(1, 12);
    for (int trial = 0; trial < 2000; ++trial) {
        const int n = 1 + trial % 14;                         // token units 1..14
        const std::int64_t B = 1 + (trial / 14) % 4;          // rows 1..4
        const std::int64_t G = (trial % 3 == 0) ? 8 : 1;
        const int K = (trial % 5 == 0) ? 1 : pick_k(rng);
        const cut_mode mode = (trial % 2) ? cut_mode::shared : cut_mode::per_microbatch;
        const bool integer = trial % 4 < 2;
        if (B >= 3 && n > 11) continue;                      // keeps the exhaustive side fast
        switch (trial % 3) {
        case 0: check_against_brute_force(random_polynomial(rng, integer, false), K, n * G, B, G, mode, integer); break;
        case 1: check_against_brute_force(random_polynomial(rng, integer, true), K, n * G, B, G, mode, integer); break;
        default: check_against_brute_force(noise_latency{rng(), integer}, K, n * G, B, G, mode, integer); break;
        }
    }
}

TEST_CASE("slicing DP: K = 1 gives the least sum; scaling times scales T and keeps the scheme", "[plan][dp]")
{
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 30; ++trial) {
        const auto model = random_polynomial(rng, false, trial % 2 == 1);
        const std::int64_t L = 4 + trial % 9, B = 1 + trial % 3;
        for (auto mode : {cut_mode::shared, cut_mode::per_microbatch}) {
            const auto one = plan_slices(model, slicing_problem{1, L, B, 1, mode});
            CHECK(one.objective == Approx(one.sum));
            // K = 1: T is the least sum over every scheme, i.e. brute force with K = 1
            if (mode == cut_mode::shared)
                CHECK(one.objective == Approx(tpipe::test::brute_shared(model, 1, L, B, 1).objective).epsilon(1e-12));

            const int K = 2 + trial % 7;
            const auto base = plan_slices(model, slicing_problem{K, L, B, 1, mode});
            auto k = model.coefficients();
            for (auto& v : k) v *= 4.0; // a power of two: scaling is exact in binary floating point
            const auto scaled = plan_slices(tpipe::polynomial_latency(k), slicing_problem{K, L, B, 1, mode});
            CHECK(scaled.objective == 4.0 * base.objective);
            CHECK(scaled.slices == base.slices);
            CHECK(scaled.microbatches == base.microbatches);
        }
    }
}

TEST_CASE("slicing DP: a context-free linear model matches the closed form", "[plan][dp]")
{
    // t = 1 + s: T = (k + L) + (K-1)(1 + longest slice), least at longest = ceil(L/k).
    tpipe::polynomial_latency model;
    model.set(tpipe::polynomial_latency::term::one, 1.0).set(tpipe::polynomial_latency::term::s, 1.0);
    for (int K : {1, 2, 9, 48})
        for (std::int64_t L : {1, 7, 64, 300}) {
            double closed = 1e300;
            for (std::int64_t k = 1; k <= L; ++k)
                closed = std::min(closed, static_cast<double>(k + L + (K - 1) * (1 + (L + k - 1) / k)));
            const auto plan = plan_slices(model, slicing_problem{K, L, 1, 1});
            CHECK(plan.objective == closed);
        }
}

//! The problem passes the up-front checks (without solving it).
void ds_validate_ok(const slicing_problem& p) { tpipe::detail::slicing::validate(p); }

TEST_CASE("slicing DP refuses bad problems and bad models", "[plan][dp]")
{
    tpipe::polynomial_latency model(std::array<double, 8>{1, 0, 1, 0, 0, 0, 0, 0});
    CHECK_THROWS_AS(plan_slices(model, slicing_problem{0, 8, 1, 1}), tpipe::invalid_argument);
    CHECK_THROWS_WITH(plan_slices(model, slicing_problem{2, 10, 1, 4}), Catch::Contains("not a multiple"));
    CHECK_THROWS_AS(plan_slices(model, slicing_problem{2, 8, 0, 1}), tpipe::invalid_argument);
    tpipe::polynomial_latency negative(std::array<double, 8>{-5, 0, 1, 0, 0, 0, 0, 0});
    CHECK_THROWS_WITH(plan_slices(negative, slicing_problem{2, 8, 1, 1}), Catch::Contains(">= 0"));
    auto never = tpipe::function_latency{[](std::int64_t, std::int64_t, std::int64_t) {
        return std::numeric_limits<double>::infinity();
    }};
    CHECK_THROWS_WITH(plan_slices(never, slicing_problem{2, 8, 1, 1}), Catch::Contains("+inf"));
    // Work of sizes x n(n+1)/2 unit times is refused up front, naming the limit (65536 tokens at
    // G = 1 needed ~17 GB; 2048 tokens x 64 row counts ~3 GB and a minute).
    CHECK_THROWS_WITH(plan_slices(model, slicing_problem{2, 65536, 1, 1}),
                      Catch::Contains("2147516416 unit times") && Catch::Contains("at most 67108864"));
    CHECK_THROWS_WITH(plan_slices(model, slicing_problem{2, 2048, 64, 1}), Catch::Contains("unit times"));
    CHECK_NOTHROW(ds_validate_ok(slicing_problem{2, 2048, 64, 8}));
}

TEST_CASE("slicing DP handles +inf units (slices the model cannot run)", "[plan][dp]")
{
    // Slices longer than 3 units cannot run: the planner must cut around them.
    auto capped = tpipe::function_latency{[](std::int64_t b, std::int64_t s, std::int64_t c) {
        return s > 3 ? std::numeric_limits<double>::infinity() : 1.0 + static_cast<double>(b * s) + 0.1 * c;
    }};
    for (int K : {1, 4})
        for (auto mode : {cut_mode::shared, cut_mode::per_microbatch}) {
            const auto plan = plan_slices(capped, slicing_problem{K, 10, 2, 1, mode});
            for (const auto& s : plan.slices)
                for (auto l : s) CHECK(l <= 3);
            if (mode == cut_mode::shared) CHECK(plan.objective == tpipe::test::brute_shared(capped, K, 10, 2, 1).objective);
        }
}

TEST_CASE("slicing DP on the GPT-3 175B analytic model prefers token slices", "[plan][dp]")
{
    const auto model = tpipe::presets::analytic(tpipe::presets::gpt3_175b, 48, tpipe::presets::v100);
    const auto plan = plan_slices(model, slicing_problem{48, 2048, 2, 8});
    CHECK(plan.units() > 2);
    CHECK(plan.objective < tpipe::pipeline_objective(model, tpipe::microbatch_slicer{2}.scheme({2, 2048}), 48));
}

TEST_CASE("slicing DP agrees with the official algorithm run without its epsilon-skip", "[plan][dp]")
{
    // Per-microbatch cuts are what the official batch DP plans; with epsilon = 0 it is exact.
    std::mt19937_64 rng(31);
    for (int trial = 0; trial < 60; ++trial) {
        const auto model = random_polynomial(rng, false, trial % 3 == 0);
        const int K = 1 + trial % 11;
        const std::int64_t L = 16 + 8 * (trial % 6), B = 1 + trial % 4;
        const auto ours = plan_slices(model, slicing_problem{K, L, B, 8, cut_mode::per_microbatch});
        const auto official = tpipe::bench::reference_terapipe_dp(model, K, L, B, 8, 0.0);
        CHECK(ours.objective == Approx(official.objective).epsilon(1e-12));
    }
}

TEST_CASE("slicing DP equals plain cap enumeration on larger random inputs", "[plan][dp]")
{
    // Beyond exhaustive reach: n up to 40 units, where the incremental labels and pruning have
    // room to go wrong.
    std::mt19937_64 rng(4242);
    for (int trial = 0; trial < 60; ++trial) {
        const int n = 16 + trial % 25;
        const std::int64_t B = 1 + trial % 3;
        const int K = 1 + static_cast<int>(rng() % 40);
        const slicing_problem pr{K, n, B, 1, cut_mode::shared};
        INFO("trial " << trial << " n=" << n << " B=" << B << " K=" << K);
        if (trial % 2) {
            const auto model = random_polynomial(rng, false, trial % 4 == 1);
            CHECK(plan_slices(model, pr).objective ==
                  Approx(tpipe::test::cap_enumeration_shared(model, K, n, B, 1)).epsilon(1e-12));
        } else {
            const noise_latency model{rng(), false};
            CHECK(plan_slices(model, pr).objective ==
                  Approx(tpipe::test::cap_enumeration_shared(model, K, n, B, 1)).epsilon(1e-12));
        }
        // per-microbatch cuts against the official algorithm without its epsilon-skip
        const auto model = random_polynomial(rng, false, trial % 3 == 0);
        CHECK(plan_slices(model, slicing_problem{K, n, B, 1, cut_mode::per_microbatch}).objective ==
              Approx(tpipe::bench::reference_terapipe_dp(model, K, n, B, 1, 0.0).objective).epsilon(1e-12));
    }
}

TEST_CASE("slicing DP honours a cap on rows per microbatch", "[plan][dp]")
{
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 40; ++trial) {
        const bool integer = trial % 2 == 0;
        const auto model = random_polynomial(rng, integer, false);
        const std::int64_t B = 2 + trial % 3, R = 1 + trial % 2, L = 3 + trial % 8;
        const int K = 1 + trial % 6;
        slicing_problem pr{K, L, B, 1, cut_mode::shared, R};
        const auto plan = plan_slices(model, pr);
        for (auto b : plan.microbatches) CHECK(b <= R);
        const auto ref = tpipe::test::brute_shared(model, K, L, B, 1, R);
        CHECK(plan.objective == Approx(ref.objective).epsilon(1e-12));
        if (integer) CHECK(plan.microbatches == ref.microbatches);
        pr.mode = cut_mode::per_microbatch;
        for (auto b : plan_slices(model, pr).microbatches) CHECK(b <= R);
        for (auto b : tpipe::best_microbatch_only(model, pr).microbatches) CHECK(b <= R);
    }
    // a table profiled up to b = 2 plans a batch of 4 once microbatches are capped at 2 rows
    auto only_small = tpipe::function_latency{[](std::int64_t b, std::int64_t s, std::int64_t c) {
        if (b > 2) throw tpipe::invalid_argument("not profiled");
        return 1.0 + static_cast<double>(b * s) + 0.01 * static_cast<double>(b * s * c);
    }};
    CHECK_THROWS_AS(plan_slices(only_small, slicing_problem{4, 16, 4, 1}), tpipe::invalid_argument);
    CHECK_NOTHROW(plan_slices(only_small, slicing_problem{4, 16, 4, 1, cut_mode::shared, 2}));
}

TEST_CASE("partition helpers: counts and iterative enumeration", "[plan][dp][batch]")
{
    namespace ds = tpipe::detail::slicing;
    CHECK(ds::partition_count(10, 10, 1000) == 42);
    CHECK(ds::partition_count(25, 25, 5000) == 1958);
    CHECK(ds::partition_count(10, 3, 1000) == 14);
    CHECK(ds::partition_count(26, 26, 2001) == 2001); // p(26) = 2436, saturated
    CHECK(ds::partition_count(1000000, 1, 10) == 1);
    std::size_t seen = 0;
    std::int64_t parts = 0;
    ds::partitions(12, 12, [&](const ds::size_runs& r) {
        ++seen;
        std::int64_t total = 0;
        for (std::size_t i = 0; i < r.size(); ++i) {
            total += r[i].first * r[i].second;
            if (i) CHECK(r[i].first < r[i - 1].first);
        }
        CHECK(total == 12);
    });
    CHECK(seen == 77); // p(12)
    // a million parts of one: one partition, no deep recursion
    ds::partitions(1000000, 1, [&](const ds::size_runs& r) { parts = r.front().second; });
    CHECK(parts == 1000000);
}

TEST_CASE("shared cut beyond max_partitions: balanced partitions, bounded by the per-microbatch optimum",
          "[plan][dp][batch]")
{
    std::mt19937_64 rng(5);
    for (int trial = 0; trial < 30; ++trial) {
        const auto model = random_polynomial(rng, false, false);
        const int K = 1 + trial % 6;
        const std::int64_t B = 5 + trial % 6;
        slicing_problem problem{K, 32, B, 8, cut_mode::shared};
        const auto exact = plan_slices(model, problem);
        CHECK(exact.stats.exact);
        problem.max_partitions = 3; // p(B) > 3 for every B >= 5
        const auto bounded = plan_slices(model, problem);
        INFO("trial " << trial << " K=" << K << " B=" << B);
        CHECK_FALSE(bounded.stats.exact);
        CHECK(bounded.shared_cut());
        // balanced: at most two sizes, one apart
        CHECK(bounded.microbatches.front() - bounded.microbatches.back() <= 1);
        CHECK(bounded.objective >= exact.objective * (1 - 1e-12));
        CHECK(bounded.stats.lower_bound > 0);
        CHECK(bounded.stats.lower_bound <= exact.objective * (1 + 1e-12));
        // it is the best balanced plan: no balanced partition does better with its own exact cut
        for (std::int64_t m = 1; m <= B; ++m) {
            std::vector<std::int64_t> sizes(static_cast<std::size_t>(B % m), B / m + 1);
            sizes.resize(static_cast<std::size_t>(m), B / m);
            const auto one = tpipe::test::brute_shared_sizes(model, K, 32, sizes, 8);
            CHECK(bounded.objective <= one * (1 + 1e-9));
        }
    }
}

TEST_CASE("large batches: refused beyond 65536 rows, fast in shared mode", "[plan][dp][batch]")
{
    const tpipe::polynomial_latency model(std::array<double, 8>{1e-3, 1e-5, 1e-5, 0, 1e-6, 0, 0, 0});
    CHECK_THROWS_WITH(plan_slices(model, slicing_problem{2, 1, 1000000, 1}), Catch::Contains("at most 65536"));
    CHECK_THROWS_WITH(plan_slices(model, slicing_problem{2, 8, 1000, 1, cut_mode::per_microbatch}),
                      Catch::Contains("at most 512"));
    const auto plan = plan_slices(model, slicing_problem{4, 16, 4096, 8});
    CHECK_FALSE(plan.stats.exact);
    std::int64_t rows = 0;
    for (auto b : plan.microbatches) rows += b;
    CHECK(rows == 4096);
    CHECK(plan.stats.solve_seconds < 10);
}
