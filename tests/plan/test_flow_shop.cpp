// The planner's objective is a makespan: when every stage spends t_u on unit u (forward only,
// zero-cost backward and transfers), GPipe over the planned units, in order, finishes at
// exactly sum_u t_u + (K-1) max_u t_u (a permutation flow shop with identical machines).
#include <catch2/catch.hpp>

#include <random>

#include "tpipe/plan/latency_costs.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/slicing_dp.hpp"
#include "tpipe/schedule/gpipe.hpp"
#include "tpipe/sim/simulate.hpp"

namespace {

//! Forward of unit u takes the model's t_u on every stage; everything else is free.
template <tpipe::latency_model M>
struct forward_flow_shop {
    const M* model;
    double compute(tpipe::op kind, int, const tpipe::unit& u) const
    {
        return kind == tpipe::op::F ? model->seconds(u.rows(), u.tokens(), u.context()) : 0.0;
    }
    double transfer(tpipe::op, int, int, const tpipe::unit&) const { return 0.0; }
};

template <class M>
void check_identity(const M& model, int K, std::int64_t L, std::int64_t B, std::int64_t G, tpipe::cut_mode mode)
{
    INFO("K=" << K << " L=" << L << " B=" << B << " G=" << G);
    const auto plan = tpipe::plan_slices(model, tpipe::slicing_problem{K, L, B, G, mode});
    const auto prog = tpipe::gpipe{}.program(tpipe::topology{.ranks = K}, plan.scheme());
    const auto sim = tpipe::simulate(prog, forward_flow_shop<M>{&model});
    CHECK(sim.makespan == Approx(plan.objective).epsilon(1e-12));
}

} // namespace

TEST_CASE("planned objective equals the simulated forward flow-shop makespan", "[plan][sim]")
{
    std::mt19937_64 rng(99);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int trial = 0; trial < 40; ++trial) {
        std::array<double, 8> k{};
        for (auto& v : k) v = u(rng) * 1e-3;
        k[0] += 2e-3;
        const tpipe::polynomial_latency model(k);
        const int K = 1 + trial % 9;
        const auto mode = trial % 2 ? tpipe::cut_mode::shared : tpipe::cut_mode::per_microbatch;
        check_identity(model, K, 8 + 8 * (trial % 5), 1 + trial % 4, 1 + trial % 2, mode);
    }
    // and on the built-in GPT-3 model at a realistic size
    const auto gpt = tpipe::presets::analytic(tpipe::presets::gpt3_13b, 8, tpipe::presets::a100);
    check_identity(gpt, 8, 2048, 4, 64, tpipe::cut_mode::shared);
}

static_assert(tpipe::cost_model<tpipe::latency_costs<tpipe::polynomial_latency>>);

TEST_CASE("latency_costs turns a latency model into simulator costs", "[plan][sim]")
{
    const tpipe::polynomial_latency model(std::array<double, 8>{2e-3, 0, 1e-5, 0, 1e-6, 0, 1e-9, 0});
    const auto plan = tpipe::plan_slices(model, tpipe::slicing_problem{4, 256, 2, 8});
    const auto prog = tpipe::gpipe{}.program(tpipe::topology{.ranks = 4}, plan.scheme());
    // all of t in the forward: the flow-shop identity again
    CHECK(tpipe::simulate(prog, tpipe::latency_costs{model, 1.0}).makespan == Approx(plan.objective).epsilon(1e-12));
    // a third forward, two thirds backward: an F+B iteration runs at least the units' total work per stage
    const auto full = tpipe::simulate(prog, tpipe::latency_costs{model});
    CHECK(full.makespan >= plan.sum * (1 - 1e-12));
    CHECK_THROWS_AS(tpipe::latency_costs(model, 1.5), tpipe::invalid_argument);
}

TEST_CASE("forward + backward GPipe makespan equals the objective when F and B split t in one ratio",
          "[plan][sim]")
{
    // The forward wave's longest path ends at (last stage, last unit), the backward wave's starts
    // there: sum f + (K-1) max f + sum b + (K-1) max b, which is sum t + (K-1) max t when
    // f = share * t and b = (1 - share) * t for every unit.
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    for (int trial = 0; trial < 60; ++trial) {
        std::array<double, 8> k{};
        for (auto& v : k) v = u(rng) * 1e-3;
        k[0] += 1e-3;
        const tpipe::polynomial_latency model(k);
        const int K = 1 + trial % 7;
        const auto mode = trial % 2 ? tpipe::cut_mode::shared : tpipe::cut_mode::per_microbatch;
        const auto plan = tpipe::plan_slices(model, tpipe::slicing_problem{K, 16 + 8 * (trial % 4), 1 + trial % 3, 8, mode});
        const auto prog = tpipe::gpipe{}.program(tpipe::topology{.ranks = K}, plan.scheme());
        const double share = 0.2 + 0.1 * (trial % 5);
        INFO("trial " << trial << " K=" << K << " share=" << share);
        CHECK(tpipe::simulate(prog, tpipe::latency_costs{model, share}).makespan ==
              Approx(plan.objective).epsilon(1e-12));
    }
}
