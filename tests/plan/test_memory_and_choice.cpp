// Memory model (closed forms, the simulated peaks in bytes), the ranked near-optimal cuts
// (against exhaustive enumeration) and the choice by a schedule's simulated makespan (never
// worse than the DP's plan; equal to brute force over every cut).
#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <random>

#include "brute_force.hpp"
#include "tpipe/plan/latency_costs.hpp"
#include "tpipe/plan/memory_model.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/ranked_cuts.hpp"
#include "tpipe/plan/schedule_choice.hpp"

namespace {

constexpr tpipe::transformer_shape tiny{"tiny", 4, 64, 4, 1000};

//! A shared-cut plan for sizes `rows` and a cut in units of g tokens.
tpipe::slicing_plan plan_of(const std::vector<std::int64_t>& rows, const std::vector<int>& cut, std::int64_t g, int K,
                            std::int64_t L)
{
    tpipe::slicing_plan p;
    p.stages = K;
    p.seq_len = L;
    p.microbatches = rows;
    std::vector<std::int64_t> lengths;
    for (int l : cut) lengths.push_back(l * g);
    p.slices.assign(rows.size(), lengths);
    return p;
}

tpipe::polynomial_latency random_model(std::mt19937& rng)
{
    std::uniform_real_distribution<double> u(0, 1);
    return tpipe::polynomial_latency({1 + 4 * u(rng), 0.5 * u(rng), 0.3 * u(rng), 0.02 * u(rng), 0.2 * u(rng),
                                      0.01 * u(rng), 0.002 * u(rng), 0.01 * u(rng)});
}

//! The model's passes, and transfers that grow with the unit's tokens (which t does not include).
struct sized_transfers {
    tpipe::latency_costs<tpipe::polynomial_latency> passes;
    double per_token;
    double compute(tpipe::op kind, int stage, const tpipe::unit& u) const { return passes.compute(kind, stage, u); }
    double transfer(tpipe::op, int, int, const tpipe::unit& u) const { return per_token * u.tokens() * u.rows(); }
};

} // namespace

TEST_CASE("memory sizes parse with binary and decimal suffixes, and nothing else", "[plan][memory]")
{
    CHECK(tpipe::parse_bytes("80GiB") == 80.0 * 1024 * 1024 * 1024);
    CHECK(tpipe::parse_bytes("14GB") == 14e9);
    CHECK(tpipe::parse_bytes("512MiB") == 512.0 * 1024 * 1024);
    CHECK(tpipe::parse_bytes("1e9") == 1e9);
    CHECK(tpipe::parse_bytes("3B") == 3);
    for (const char* bad : {"", "GiB", "14 GB", "-1GB", "0", "5XB", "abc", "inf", "1e400"})
        CHECK_THROWS_AS(tpipe::parse_bytes(bad), tpipe::invalid_argument);
}

TEST_CASE("memory model: the stated closed forms", "[plan][memory]")
{
    const int tp = 2, layers = 3;
    const std::int64_t L = 32, H = tiny.hidden;
    const tpipe::memory_model m(tiny, layers, tp, L);
    const double per_layer = 12.0 * H * H / tp + (3.0 * H / tp + H + 4.0 * H / tp + H) + 4.0 * H;
    CHECK(m.parameters() == Approx(layers * per_layer + static_cast<double>(tiny.vocab + L) * H / tp));
    CHECK(m.options().bytes_per_parameter() == 16);
    CHECK(m.static_bytes() == Approx(16 * m.parameters()));
    // b s H (10 + 24/tp) + 5 (heads/tp) b s (c + s), per layer.
    CHECK(m.unit_bytes(2, 8, 16) == Approx(layers * (2.0 * 8 * H * (10 + 24.0 / tp) + 5.0 * 2 * 2 * 8 * 24)));
    CHECK(m.kv_bytes(3) == Approx(layers * 2.0 * 3 * L * H / tp * 2));
    const tpipe::memory_model no_embedding(tiny, layers, tp, L, {.embedding = false});
    CHECK(no_embedding.parameters() == Approx(layers * per_layer));
    CHECK_THROWS_AS(tpipe::memory_model(tiny, layers, 3, L), tpipe::invalid_argument);

    // Every unit alive: the units, each microbatch's K/V, one K/V gradient of the largest.
    const auto p = plan_of({2, 1}, {1, 3}, 8, 4, L);
    const double units =
        m.unit_bytes(2, 8, 0) + m.unit_bytes(2, 24, 8) + m.unit_bytes(1, 8, 0) + m.unit_bytes(1, 24, 8);
    CHECK(m.all_alive_bytes(p.scheme()) == Approx(units + m.kv_bytes(2) + m.kv_bytes(1) + m.kv_bytes(2)));
    // The least over every plan: one-row microbatches, g-token slices; no plan needs less.
    const double least = m.least_all_alive_bytes(3, 8);
    for (const auto& rows : tpipe::test::row_partitions(3))
        for (const auto& cut : tpipe::test::compositions(4))
            CHECK(m.all_alive_bytes(plan_of(rows, cut, 8, 4, L).scheme()) >= least * (1 - 1e-12));
    CHECK(m.all_alive_bytes(plan_of({1, 1, 1}, {1, 1, 1, 1}, 8, 4, L).scheme()) == Approx(least));
}

TEST_CASE("memory model: recomputation and the process floor", "[plan][memory]")
{
    const int tp = 2, layers = 3;
    const std::int64_t L = 32, H = tiny.hidden;
    const tpipe::memory_model kept(tiny, layers, tp, L);
    const tpipe::memory_model rc(tiny, layers, tp, L, {.recompute = true, .input_bytes = 4, .floor_bytes = 1e6});
    CHECK(rc.static_bytes() == Approx(kept.static_bytes() + 1e6));
    // A unit keeps its stage input only; its full saves are the model's without recomputation.
    CHECK(rc.unit_bytes(2, 8, 16) == Approx(2.0 * 8 * H / tp * 4));
    CHECK(rc.full_unit_bytes(2, 8, 16) == Approx(kept.unit_bytes(2, 8, 16)));
    // Every unit alive: the inputs, the K/V, and the largest unit's recomputed saves once.
    const auto p = plan_of({2, 1}, {1, 3}, 8, 4, L);
    const double inputs = rc.unit_bytes(2, 8, 0) + rc.unit_bytes(2, 24, 8) + rc.unit_bytes(1, 8, 0) + rc.unit_bytes(1, 24, 8);
    CHECK(rc.all_alive_bytes(p.scheme()) ==
          Approx(inputs + rc.kv_bytes(2) + rc.kv_bytes(1) + rc.kv_bytes(2) + kept.unit_bytes(2, 24, 8)));
    CHECK(rc.all_alive_bytes(p.scheme()) < kept.all_alive_bytes(p.scheme()));
    const double least = rc.least_all_alive_bytes(3, 8);
    for (const auto& rows : tpipe::test::row_partitions(3))
        for (const auto& cut : tpipe::test::compositions(4))
            CHECK(rc.all_alive_bytes(plan_of(rows, cut, 8, 4, L).scheme()) >= least * (1 - 1e-12));
}

TEST_CASE("simulated activation peaks in bytes agree with the simulator's unit counts", "[plan][memory][sim]")
{
    // Without attention scores and K/V every unit of a uniform cut weighs the same, so the byte
    // peak is the simulator's peak count times one unit.
    const std::int64_t L = 64;
    const tpipe::memory_model flat(tiny, 1, 1, L, {.score_bytes = 0, .cache_bytes = 0});
    const tpipe::memory_model full(tiny, 1, 1, L);
    const auto model = tpipe::polynomial_latency({1, 0, 0.01, 0.001});
    for (const char* name : {"terapipe-1f1b", "gpipe", "1f1b"})
        for (int K : {1, 2, 4}) {
            INFO(name << " K=" << K);
            const auto plan = plan_of({2, 2, 2}, {2, 2, 2, 2}, 8, K, L);
            const auto sim = tpipe::simulate_plan(name, plan, tpipe::latency_costs(model));
            const auto bytes = tpipe::peak_activation_bytes(sim, plan.scheme(), flat);
            for (int r = 0; r < K; ++r) CHECK(bytes[r] == Approx(sim.peak_activations[r] * flat.unit_bytes(2, 16, 0)));
            // GPipe's first stage holds everything at its first backward: all_alive_bytes.
            if (std::string(name) == "gpipe")
                CHECK(tpipe::peak_activation_bytes(sim, plan.scheme(), full)[0] ==
                      Approx(full.all_alive_bytes(plan.scheme())));
        }
    CHECK_THROWS_AS(tpipe::simulate_plan("zb-v", plan_of({1}, {8}, 8, 2, L), tpipe::latency_costs(model)),
                    tpipe::invalid_argument);
}

TEST_CASE("ranked cuts come out in objective order, as exhaustive enumeration says", "[plan][ranked]")
{
    std::mt19937 rng(11);
    for (int trial = 0; trial < 60; ++trial) {
        const int n = 2 + trial % 9, K = 1 + static_cast<int>(rng() % 8);
        const std::int64_t g = 1 + static_cast<std::int64_t>(rng() % 3);
        const std::vector<std::int64_t> rows = trial % 3 ? std::vector<std::int64_t>{2, 1} : std::vector<std::int64_t>{3};
        const auto model = random_model(rng);
        const tpipe::slicing_problem p{K, n * g, 3, g, tpipe::cut_mode::shared};
        INFO("trial " << trial << " n=" << n << " K=" << K);
        std::vector<double> all;
        for (const auto& cut : tpipe::test::compositions(n)) {
            auto q = plan_of(rows, cut, g, K, n * g);
            all.push_back(tpipe::pipeline_objective(model, q.scheme(), K));
        }
        std::sort(all.begin(), all.end());
        // The k best.
        const std::size_t k = 1 + trial % 7;
        const auto ranked = tpipe::rank_shared_cuts(model, p, rows, {.max_plans = k, .within = 1e9});
        REQUIRE(ranked.plans.size() == std::min(k, all.size()));
        for (std::size_t i = 0; i < ranked.plans.size(); ++i) {
            CHECK(ranked.plans[i].objective == Approx(all[i]).epsilon(1e-12));
            CHECK(ranked.plans[i].slices.front().size() >= 1);
        }
        CHECK(ranked.complete == (k >= all.size()));
        // Everything within 3 %, and nothing else.
        const auto near = tpipe::rank_shared_cuts(model, p, rows, {.max_plans = 1000, .within = 0.03});
        CHECK(near.complete);
        const auto within = std::count_if(all.begin(), all.end(), [&](double t) { return t <= all[0] * 1.03 * (1 + 1e-9); });
        CHECK(near.plans.size() == static_cast<std::size_t>(within));
        // A filter: only cuts with an even number of slices.
        auto even = [](const tpipe::slicing_plan& q) { return q.slices.front().size() % 2 == 0; };
        const auto filtered = tpipe::rank_shared_cuts(model, p, rows, {.max_plans = 1, .within = 0}, even);
        if (n >= 2) {
            double best_even = std::numeric_limits<double>::infinity();
            for (const auto& cut : tpipe::test::compositions(n))
                if (cut.size() % 2 == 0)
                    best_even = std::min(best_even, tpipe::pipeline_objective(model, plan_of(rows, cut, g, K, n * g).scheme(), K));
            REQUIRE(filtered.plans.size() == 1);
            CHECK(filtered.plans[0].objective == Approx(best_even).epsilon(1e-12));
        }
    }
}

TEST_CASE("the schedule's choice never simulates slower than the DP's plan and equals brute force", "[plan][choice]")
{
    std::mt19937 rng(5);
    int improved = 0; // trials where the DP's plan is not the fastest to simulate
    for (int trial = 0; trial < 40; ++trial) {
        const int n = 3 + trial % 6, K = 2 + static_cast<int>(rng() % 5);
        const std::int64_t g = 4;
        const auto model = random_model(rng);
        const tpipe::slicing_problem p{K, n * g, 2, g, tpipe::cut_mode::shared};
        const char* schedule = trial % 2 ? "terapipe-1f1b" : "gpipe";
        INFO("trial " << trial << " " << schedule << " n=" << n << " K=" << K);
        const auto dp = tpipe::plan_slices(model, p);
        // Transfers priced apart from compute: a per-unit cost the objective does not see.
        const sized_transfers costs{tpipe::latency_costs(model, 0.2 + 0.05 * (trial % 5)), 0.05 + 0.1 * (trial % 4)};
        const auto all = tpipe::choose_by_schedule(model, p, dp, schedule, costs, {.max_plans = 1u << n, .within = 1e9});
        const auto few = tpipe::choose_by_schedule(model, p, dp, schedule, costs, {.max_plans = 3, .within = 0.05});
        CHECK(all.ranking.complete);
        const double dp_makespan = tpipe::simulate_plan(schedule, dp, costs).makespan;
        CHECK(few.candidates.front().makespan == dp_makespan);
        CHECK(few.candidates[few.chosen].makespan <= dp_makespan);
        CHECK(all.candidates[all.chosen].makespan <= few.candidates[few.chosen].makespan);
        double brute = std::numeric_limits<double>::infinity();
        for (const auto& cut : tpipe::test::compositions(n))
            brute = std::min(brute, tpipe::simulate_plan(schedule, plan_of(dp.microbatches, cut, g, K, n * g), costs).makespan);
        CHECK(all.candidates[all.chosen].makespan == brute);
        improved += brute < dp_makespan;
    }
    CHECK(improved > 0); // the objective does not already pick the schedule's best
}

TEST_CASE("a memory budget keeps only the plans that fit, and refuses when none does", "[plan][choice][memory]")
{
    const std::int64_t L = 64;
    const tpipe::slicing_problem p{4, L, 2, 8, tpipe::cut_mode::shared};
    const auto model = tpipe::presets::analytic(tiny, 4, tpipe::presets::v100);
    const tpipe::memory_model mem(model, L);
    const auto dp = tpipe::plan_slices(model, p);
    const tpipe::link_priced_costs costs(model);
    const auto free = tpipe::choose_by_schedule(model, p, dp, "terapipe-1f1b", costs, {.max_plans = 200, .within = 1e9}, &mem);
    std::vector<double> needs;
    for (const auto& c : free.candidates) needs.push_back(c.peak_bytes);
    std::sort(needs.begin(), needs.end());
    REQUIRE(needs.front() < needs.back());
    const double budget = (needs.front() + needs.back()) / 2;
    const auto tight = tpipe::choose_by_schedule(model, p, dp, "terapipe-1f1b", costs, {.max_plans = 200, .within = 1e9}, &mem, budget);
    const auto& chosen = tight.candidates[tight.chosen];
    CHECK(chosen.peak_bytes <= budget);
    for (const auto& c : tight.candidates)
        if (c.peak_bytes <= budget) CHECK(chosen.makespan <= c.makespan);
    CHECK_THROWS_WITH(tpipe::choose_by_schedule(model, p, dp, "terapipe-1f1b", costs, {.max_plans = 200, .within = 1e9},
                                                &mem, needs.front() * 0.99),
                      Catch::Contains("least need"));
    // Link-priced costs: compute + the two messages give back the model's t.
    const tpipe::unit u{0, 1, 0, 2, 16, 40};
    CHECK(costs.compute(tpipe::op::F, 0, u) + costs.compute(tpipe::op::B, 0, u) + 2 * costs.transfer(tpipe::op::F, 0, 1, u) ==
          Approx(model.seconds(2, 24, 16)));
}
