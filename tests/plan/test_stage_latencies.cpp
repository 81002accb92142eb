// One latency model per stage (plan/stage_latencies.hpp): the slowest stage's model, what the
// DP then optimises, the simulator pricing each stage by its own model, and the refusals.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "brute_force.hpp"
#include "tpipe/plan/latency_costs.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/schedule_choice.hpp"
#include "tpipe/plan/slicing_dp.hpp"
#include "tpipe/plan/stage_latencies.hpp"
#include "tpipe/plan/table_latency.hpp"

using tpipe::cut_mode;
using tpipe::polynomial_latency;
using tpipe::slicing_problem;
using tpipe::slowest_stage_latency;

static_assert(tpipe::token_monotone_latency_model<slowest_stage_latency<polynomial_latency>>);
static_assert(tpipe::latency_model<slowest_stage_latency<tpipe::table_latency>> &&
              !tpipe::token_monotone_latency_model<slowest_stage_latency<tpipe::table_latency>>);
static_assert(tpipe::latency_model<slowest_stage_latency<tpipe::any_latency>>);
static_assert(tpipe::cost_model<tpipe::stage_latency_costs<polynomial_latency>>);

namespace {

polynomial_latency random_polynomial(std::mt19937_64& rng, bool integer)
{
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::array<double, 8> k{};
    for (auto& v : k) v = integer ? std::floor(u(rng) * 6) : u(rng) * 1e-3;
    k[0] += integer ? 20 : 5e-3; // a per-unit overhead: slicing is not free
    return polynomial_latency(k);
}

//! Integer times (exact sums) on b in {1, 2, 3}, s in {2, 4, 8, 16}, with context samples.
tpipe::table_latency integer_table(double scale)
{
    std::vector<tpipe::latency_sample> out;
    for (std::int64_t b : {1, 2, 3})
        for (std::int64_t s : {2, 4, 8, 16})
            for (std::int64_t c : {0, 2, 6, 14}) {
                double t = scale * static_cast<double>(8 + b * s) + static_cast<double>(s == 4 ? 3 : 0);
                if (c > 0) t += static_cast<double>(1 + b * s * c / 4);
                out.push_back({b, s, c, t});
            }
    return tpipe::table_latency(std::move(out));
}

//! Stage k of the plan's units priced by models[k], one time per unit in scheme order.
template <class M>
std::vector<std::vector<double>> grid(const std::vector<M>& models, const tpipe::slicing_plan& plan)
{
    std::vector<std::vector<double>> t(models.size());
    const auto sch = plan.scheme();
    for (std::size_t k = 0; k < models.size(); ++k)
        for (int m = 0; m < sch.microbatches(); ++m)
            for (int i = 0; i < sch.slices(m); ++i) {
                const auto u = sch.at(m, i);
                t[k].push_back(models[k].seconds(u.rows(), u.tokens(), u.context()));
            }
    return t;
}

} // namespace

TEST_CASE("slowest_stage_latency over K identical models plans exactly as the one model", "[plan][stages]")
{
    std::mt19937_64 rng(38);
    for (int trial = 0; trial < 24; ++trial) {
        const auto model = random_polynomial(rng, trial % 2 == 0);
        const int K = 1 + trial % 5;
        const auto mode = trial % 3 == 2 ? cut_mode::per_microbatch : cut_mode::shared;
        const slicing_problem p{K, 32 + 16 * (trial % 3), 1 + trial % 4, 4, mode};
        INFO("trial " << trial << " K=" << K);
        const slowest_stage_latency<polynomial_latency> stages(std::vector<polynomial_latency>(K, model));
        CHECK(stages.stages() == K);
        const auto one = tpipe::plan_slices(model, p), many = tpipe::plan_slices(stages, p);
        CHECK(many.objective == one.objective);
        CHECK(many.t_max == one.t_max);
        CHECK(many.microbatches == one.microbatches);
        CHECK(many.slices == one.slices);
        // and the per-stage simulation is the flow-shop identity: the objective itself
        const double share = 0.25 + 0.125 * (trial % 4);
        const auto sim = tpipe::simulate_plan("gpipe", many, tpipe::stage_latency_costs(stages, share));
        CHECK(sim.makespan == Approx(many.objective).epsilon(1e-12));
    }
    // through any_latency too (what tpipe-plan slice builds from files)
    const auto model = random_polynomial(rng, false);
    const slowest_stage_latency<tpipe::any_latency> erased(std::vector<tpipe::any_latency>(3, tpipe::any_latency(model)));
    const slicing_problem p{3, 64, 2, 4};
    CHECK(tpipe::plan_slices(erased, p).slices == tpipe::plan_slices(model, p).slices);
}

TEST_CASE("slowest_stage_latency is the max of its stages and the DP is exact for it (brute force)",
          "[plan][stages]")
{
    std::mt19937_64 rng(4);
    const auto table = integer_table(6);
    int crossovers = 0;
    for (int trial = 0; trial < 12; ++trial) {
        // a polynomial stage and a table stage (either order), plus a third polynomial for K = 3
        const tpipe::any_latency poly(random_polynomial(rng, true)), table_stage(table);
        std::vector<tpipe::any_latency> models;
        models.reserve(3);
        models.push_back(trial % 2 ? table_stage : poly);
        models.push_back(trial % 2 ? poly : table_stage);
        if (trial % 3 == 2) models.push_back(tpipe::any_latency(random_polynomial(rng, true)));
        const int K = static_cast<int>(models.size());
        const slowest_stage_latency<tpipe::any_latency> slowest(models);
        for (std::int64_t b = 1; b <= 3; ++b)
            for (std::int64_t s : {2, 6, 16})
                for (std::int64_t c : {0, 4, 10}) {
                    double mx = 0;
                    for (const auto& m : models) mx = std::max(mx, m.seconds(b, s, c));
                    CHECK(slowest.seconds(b, s, c) == mx);
                }
        // the max switches between stages across units (else this would test one model)
        std::vector<int> slowest_at;
        for (std::int64_t s = 2; s <= 16; s += 2)
            for (std::int64_t c = 0; c + s <= 16; c += 2) {
                int arg = 0;
                for (int m = 1; m < K; ++m)
                    if (models[static_cast<std::size_t>(m)].seconds(1, s, c) >
                        models[static_cast<std::size_t>(arg)].seconds(1, s, c))
                        arg = m;
                slowest_at.push_back(arg);
            }
        crossovers += std::adjacent_find(slowest_at.begin(), slowest_at.end(), std::not_equal_to<>()) !=
                      slowest_at.end();
        const std::int64_t B = 1 + trial % 3;
        INFO("trial " << trial << " K=" << K << " B=" << B);
        const auto plan = tpipe::plan_slices(slowest, slicing_problem{K, 16, B, 2});
        const auto ref = tpipe::test::brute_shared(slowest, K, 16, B, 2);
        CHECK(plan.objective == Approx(ref.objective).epsilon(1e-12));
        CHECK(plan.microbatches == ref.microbatches);
        CHECK(plan.slices == ref.slices);
        // the true per-stage makespan never exceeds the objective the DP minimised
        const auto sim = tpipe::simulate_plan("gpipe", plan, tpipe::stage_latency_costs(slowest));
        CHECK(sim.makespan <= plan.objective * (1 + 1e-12));
        // each rank's busy time is its own stage's work
        const auto t = grid(models, plan);
        for (int k = 0; k < K; ++k) {
            double sum = 0;
            for (double x : t[static_cast<std::size_t>(k)]) sum += x;
            CHECK(sim.busy[static_cast<std::size_t>(k)] == Approx(sum).epsilon(1e-12));
        }
    }
    CHECK(crossovers >= 6);
}

TEST_CASE("with one dominant stage the objective bounds the per-stage makespan, exact only for equal stages",
          "[plan][stages]")
{
    // The longest path through the stage x unit grid collects the dominant stage's row
    // (sum_u max_k t_k,u) exactly, but pays fill and drain at the other stages' times, not at
    // max_u t_u: sum_u M_u <= makespan <= T, strictly below T when the other stages are faster
    // on every unit; equal to T when all stages are equal.
    std::mt19937_64 rng(11);
    for (int trial = 0; trial < 20; ++trial) {
        const auto base = random_polynomial(rng, false);
        std::array<double, 8> k{};
        for (std::size_t j = 0; j < k.size(); ++j) k[j] = base.coefficient(static_cast<polynomial_latency::term>(j));
        const int K = 2 + trial % 4;
        const double factor = trial % 5 == 4 ? 1.0 : 1.25 + 0.25 * (trial % 4); // the dominant stage's slowdown
        for (auto& v : k) v *= factor;
        std::vector<polynomial_latency> models(static_cast<std::size_t>(K), base);
        models[static_cast<std::size_t>(trial % K)] = polynomial_latency(k); // dominant on every unit
        const slowest_stage_latency<polynomial_latency> slowest(models);
        const slicing_problem p{K, 64, 1 + trial % 3, 8};
        const auto plan = tpipe::plan_slices(slowest, p);
        const auto sim = tpipe::simulate_plan("gpipe", plan, tpipe::stage_latency_costs(slowest, 0.25 + 0.05 * (trial % 3)));
        INFO("trial " << trial << " K=" << K << " factor " << factor << " T=" << plan.objective << " sum=" << plan.sum
                      << " makespan=" << sim.makespan);
        CHECK(sim.makespan >= plan.sum * (1 - 1e-12));
        if (factor == 1.0) {
            CHECK(sim.makespan == Approx(plan.objective).epsilon(1e-12));
        } else {
            CHECK(sim.makespan < plan.objective * (1 - 1e-6));
            // the gap is the fill/drain priced at the faster stages: at most (K-1) t_max
            CHECK(plan.objective - sim.makespan <= (K - 1) * plan.t_max * (1 + 1e-12));
        }
    }
}

TEST_CASE("slowest_stage_latency keeps token monotonicity only when every stage has it", "[plan][stages]")
{
    const polynomial_latency up(std::array<double, 8>{1, 0, 1, 0, 1, 0, 0, 0});
    polynomial_latency down = up;
    down.set(polynomial_latency::term_of("s"), -1);
    CHECK(slowest_stage_latency<polynomial_latency>({up, up}).monotone_in_tokens());
    CHECK_FALSE(slowest_stage_latency<polynomial_latency>({up, down}).monotone_in_tokens());
}

TEST_CASE("one model per stage: refusals name what is wrong", "[plan][stages]")
{
    using V = std::vector<polynomial_latency>;
    CHECK_THROWS_WITH(slowest_stage_latency<polynomial_latency>(V{}), Catch::Contains("list of stage models is empty"));
    CHECK_THROWS_AS(tpipe::stage_latency_costs<polynomial_latency>(V{}), tpipe::invalid_argument);
    CHECK_THROWS_WITH(slowest_stage_latency<tpipe::any_latency>(std::vector<tpipe::any_latency>{
                          tpipe::any_latency(polynomial_latency()), tpipe::any_latency()}),
                      Catch::Contains("stage 1 of 2 has no model"));
    const polynomial_latency m(std::array<double, 8>{1, 0, 1, 0, 0, 0, 0, 0});
    const slowest_stage_latency<polynomial_latency> three(V{m, m, m});
    CHECK_THROWS_WITH(three.stage(3), Catch::Contains("stage 3 asked of a pipeline with 3 stage models"));
    CHECK_THROWS_WITH(three.require_stages(2), Catch::Contains("3 stage models for a pipeline of 2 stages"));
    CHECK_NOTHROW(three.require_stages(3));
    // a plan of another depth than the models
    const auto plan = tpipe::plan_slices(three, slicing_problem{2, 16, 1, 4});
    CHECK_THROWS_WITH(tpipe::simulate_plan("gpipe", plan, tpipe::stage_latency_costs(three)),
                      Catch::Contains("3 stage models for a pipeline of 2 stages"));
    CHECK_THROWS_AS(tpipe::stage_latency_costs(three, 1.5), tpipe::invalid_argument);
    // a stage whose model returns NaN is named where it is priced
    const auto nan_model = tpipe::function_latency{[](std::int64_t, std::int64_t, std::int64_t) { return std::nan(""); }};
    using F = std::remove_const_t<decltype(nan_model)>;
    const slowest_stage_latency<F> bad(std::vector<F>{nan_model});
    CHECK_THROWS_WITH(tpipe::plan_slices(bad, slicing_problem{1, 8, 1, 4}), Catch::Contains("returned nan"));
}
