// Latency models: polynomial, table (with the least-squares context fit), analytic, presets,
// JSON forms and the profiler.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <map>

#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/plan/latency_json.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/profiler.hpp"
#include "tpipe/plan/table_latency.hpp"

using tpipe::polynomial_latency;

static_assert(tpipe::latency_model<tpipe::polynomial_latency>);
static_assert(tpipe::latency_model<tpipe::table_latency>);
static_assert(tpipe::token_monotone_latency_model<tpipe::analytic_latency>);
static_assert(tpipe::latency_model<tpipe::any_latency>);
static_assert(!tpipe::latency_model<int>);

TEST_CASE("polynomial latency evaluates its monomials", "[plan][latency]")
{
    polynomial_latency p(std::array<double, 8>{1, 2, 3, 4, 5, 6, 7, 8});
    // 1 + 2b + 3s + 4c + 5bs + 6bc + 7bsc + 8bss at b=2, s=3, c=5
    CHECK(p.seconds(2, 3, 5) == 1 + 4 + 9 + 20 + 30 + 60 + 210 + 144);
    CHECK(p.monotone_in_tokens());
    p.set(polynomial_latency::term_of("s"), -1);
    CHECK_FALSE(p.monotone_in_tokens());
    CHECK_THROWS_WITH(polynomial_latency::term_of("sc"), Catch::Contains("bsc"));
    CHECK_THROWS_AS(p.seconds(0, 1, 0), tpipe::invalid_argument);
    CHECK_THROWS_AS(polynomial_latency(std::array<double, 8>{std::nan(""), 0, 0, 0, 0, 0, 0, 0}),
                    tpipe::invalid_argument);
}

namespace {
// T0 on a grid of b in {1, 2, 4}, s in {8, 16, 32, 64}; context samples follow delta exactly.
constexpr std::array<double, 4> true_delta{2e-4, 3e-6, 5e-7, 1e-8};
double t0_of(std::int64_t b, std::int64_t s) { return 1e-3 + 1e-5 * static_cast<double>(b * s) + (s == 16 ? 2e-5 : 0.0); }
std::vector<tpipe::latency_sample> synthetic_samples()
{
    std::vector<tpipe::latency_sample> out;
    for (std::int64_t b : {1, 2, 4})
        for (std::int64_t s : {8, 16, 32, 64})
            for (std::int64_t c : {0, 8, 24, 64}) {
                double t = t0_of(b, s);
                if (c > 0)
                    t += true_delta[0] + true_delta[1] * b * s + true_delta[2] * b * c + true_delta[3] * b * s * c;
                out.push_back({b, s, c, t});
            }
    return out;
}
} // namespace

TEST_CASE("table latency: measured T0, interpolation, least-squares delta", "[plan][latency]")
{
    const tpipe::table_latency table(synthetic_samples());
    for (int j = 0; j < 4; ++j) CHECK(table.delta()[j] == Approx(true_delta[j]).epsilon(1e-6).margin(1e-15));
    CHECK(table.delta_r_squared() == Approx(1.0));
    CHECK(table.seconds(2, 16, 0) == t0_of(2, 16));                      // c = 0: the measurement itself
    CHECK(table.seconds(1, 24, 0) == Approx((t0_of(1, 16) + t0_of(1, 32)) / 2)); // linear in s
    CHECK(table.seconds(3, 32, 0) == Approx((t0_of(2, 32) + t0_of(4, 32)) / 2)); // then in b
    CHECK(table.seconds(2, 32, 100) ==
          Approx(t0_of(2, 32) + true_delta[0] + true_delta[1] * 64 + true_delta[2] * 200 + true_delta[3] * 6400));
    CHECK_THROWS_WITH(table.seconds(1, 4, 0), Catch::Contains("outside the measured s"));
    CHECK_THROWS_WITH(table.seconds(8, 16, 0), Catch::Contains("outside the measured rows"));
}

TEST_CASE("table latency refuses tables it cannot fit", "[plan][latency]")
{
    auto samples = synthetic_samples();
    auto dup = samples;
    dup.push_back(dup.front());
    CHECK_THROWS_WITH(tpipe::table_latency(dup), Catch::Contains("twice"));
    auto orphan = samples;
    orphan.push_back({1, 100, 8, 1e-3});
    CHECK_THROWS_WITH(tpipe::table_latency(orphan), Catch::Contains("no c = 0"));
    std::vector<tpipe::latency_sample> few{{1, 8, 0, 1e-3}, {1, 8, 8, 2e-3}};
    CHECK_THROWS_WITH(tpipe::table_latency(few), Catch::Contains("at least 4"));
    std::vector<tpipe::latency_sample> flat;
    for (std::int64_t c : {0, 8, 16, 24, 32}) flat.push_back({1, 8, c, 1e-3 + 1e-6 * c}); // one (b, s): rank 2
    CHECK_THROWS_WITH(tpipe::table_latency(flat), Catch::Contains("linearly dependent"));
    auto negative = samples;
    negative[0].seconds = -1;
    CHECK_THROWS_AS(tpipe::table_latency(negative), tpipe::invalid_argument);
}

TEST_CASE("analytic latency grows with work and honours its presets", "[plan][latency]")
{
    namespace P = tpipe::presets;
    const auto m = P::analytic(P::gpt3_175b, 48, P::v100);
    CHECK(m.layers_per_stage() == 2);
    for (std::int64_t s : {1, 8, 64, 512})
        for (std::int64_t c : {0, 256, 1024}) {
            CHECK(m.seconds(1, s + 1, c) >= m.seconds(1, s, c));
            CHECK(m.seconds(1, s, c + 64) >= m.seconds(1, s, c));
            CHECK(m.seconds(2, s, c) >= m.seconds(1, s, c));
        }
    // a 2048-token sequence through two 175B layers on a V100: tens to hundreds of ms
    CHECK(m.seconds(1, 2048, 0) > 0.02);
    CHECK(m.seconds(1, 2048, 0) < 2.0);
    // faster devices are faster
    CHECK(P::analytic(P::gpt3_175b, 48, P::h200).seconds(1, 2048, 0) < m.seconds(1, 2048, 0));
    CHECK(P::analytic(P::gpt3_175b, 48, P::v100, {.tensor_parallel = 8}).seconds(1, 2048, 0) < m.seconds(1, 2048, 0));
    CHECK_THROWS_WITH(P::analytic(P::gpt3_1b, 25, P::v100), Catch::Contains("cannot place"));
    CHECK_THROWS_WITH(P::analytic(P::gpt3_13b, 8, P::a100, {.tensor_parallel = 3}), Catch::Contains("divide"));
    CHECK_THROWS_WITH(P::model("gpt3-7b"), Catch::Contains("gpt3-175b"));
    CHECK_THROWS_WITH(P::device("tpu"), Catch::Contains("h200"));
    CHECK(P::layers_per_stage(96, 48) == 2);
    CHECK(P::layers_per_stage(40, 16) == 3);
}

TEST_CASE("latency JSON round-trips every kind and refuses malformed files", "[plan][latency][json]")
{
    const polynomial_latency poly(std::array<double, 8>{1e-3, 0, 2e-6, 0, 1e-7, 0, 3e-10, 1e-11});
    const tpipe::table_latency table(synthetic_samples());
    const auto analytic = tpipe::presets::analytic(tpipe::presets::gpt3_13b, 8, tpipe::presets::h100, {.tensor_parallel = 2});
    const tpipe::latency_context ctx{8};
    for (auto [name, doc, model] :
         {std::tuple{"polynomial", tpipe::to_json(poly), tpipe::any_latency(poly)},
          std::tuple{"table", tpipe::to_json(table), tpipe::any_latency(table)},
          std::tuple{"analytic", tpipe::to_json(analytic), tpipe::any_latency(analytic)}}) {
        INFO(name);
        const auto back = tpipe::latency_from_json(tpipe::json::parse(tpipe::json::dump(doc)), ctx);
        for (std::int64_t s : {8, 32, 64})
            for (std::int64_t c : {0, 64}) CHECK(back.seconds(2, s, c) == Approx(model.seconds(2, s, c)).epsilon(1e-12));
    }
    // presets by name; layers per stage from the plan's stage count
    const auto named = tpipe::analytic_from_json(
        tpipe::json::parse(R"({"kind":"analytic","model":"gpt3-175b","device":"a100","tensor_parallel":8})"), {48});
    CHECK(named.layers_per_stage() == 2);
    CHECK(named.link().name == "ib-hdr");

    using tpipe::json::parse;
    CHECK_THROWS_WITH(tpipe::latency_from_json(parse(R"({"kind":"cubic"})")), Catch::Contains("unknown"));
    CHECK_THROWS_WITH(tpipe::latency_from_json(parse(R"({"kind":"polynomial","coefficients":{"q":1}})")),
                      Catch::Contains("unknown monomial"));
    CHECK_THROWS_WITH(tpipe::latency_from_json(parse(R"({"kind":"polynomial","coeffs":{}})")),
                      Catch::Contains("unknown key \"coeffs\""));
    CHECK_THROWS_WITH(tpipe::latency_from_json(parse(R"({"kind":"table","samples":[{"b":1.5,"s":8,"c":0,"seconds":1}]})")),
                      Catch::Contains("integer"));
    CHECK_THROWS_WITH(tpipe::latency_from_json(parse(R"({"kind":"analytic","model":"gpt3-175b"})")),
                      Catch::Contains("device"));
    CHECK_THROWS_AS(tpipe::json::parse(R"({"kind": "polynomial",)"), tpipe::parse_error);
    CHECK_THROWS_WITH(tpipe::load_latency("/nonexistent/model.json"), Catch::Contains("does not exist"));
}

TEST_CASE("profiler times every grid point and fits a table", "[plan][profiler]")
{
    std::map<std::array<std::int64_t, 3>, int> calls;
    auto count = [&](std::int64_t b, std::int64_t s, std::int64_t c) { ++calls[{b, s, c}]; };
    const auto samples = tpipe::measure(count, tpipe::profile_grid{{1, 2}, {8, 16}, {16, 8}, 24}, {2, 3});
    // c = 0 is added; s + c > 24 is skipped: (16, 16) goes
    CHECK(samples.size() == 2 * (3 + 2));
    for (const auto& [point, n] : calls) CHECK(n == 5);
    CHECK_THROWS_AS(tpipe::measure(count, tpipe::profile_grid{{1}, {8}, {}}, {0, 0}), tpipe::invalid_argument);

    // a workload whose time grows with b*s and b*s*c: the fitted model must rank points the same way
    auto spin = [](std::int64_t b, std::int64_t s, std::int64_t c) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20 * b * s + b * s * c / 8);
        while (std::chrono::steady_clock::now() < until) {}
    };
    const auto table = tpipe::profile(spin, tpipe::profile_grid{{1, 2}, {8, 16, 32}, {32, 64}}, {1, 3});
    CHECK(table.seconds(2, 32, 64) > table.seconds(1, 8, 0));
    CHECK(table.seconds(1, 32, 0) > table.seconds(1, 8, 0));
}

TEST_CASE("latency JSON sizes are whole numbers in their type's range, never wrapped", "[plan][json]")
{
    // 4294967304 = 2^32 + 8 became 8 through a narrowing cast.
    CHECK_THROWS_WITH(tpipe::latency_from_json(tpipe::json::parse(
                          R"({"kind": "analytic", "model": "gpt3-175b", "device": "v100", "tensor_parallel": 4294967304})")),
                      Catch::Contains("tensor_parallel must be an integer in") && Catch::Contains("got '4294967304'"));
    CHECK_THROWS_AS(tpipe::latency_from_json(tpipe::json::parse(
                        R"({"kind": "analytic", "model": "gpt3-175b", "device": "v100", "precision_bytes": 1e300})")),
                    tpipe::parse_error);
    // A model without layers is refused as such, not as "use 1..0 stages".
    CHECK_THROWS_WITH(tpipe::latency_from_json(tpipe::json::parse(
                          R"({"kind": "analytic", "model": {"layers": 0, "hidden": 8, "heads": 1, "vocab": 8}, "device": "v100"})"),
                                               tpipe::latency_context{2}),
                      Catch::Contains("model.layers must be an integer in 1.."));
}
