// Lesson 3: planning alone. A latency model, the exact TeraPipe slicing, and the simulator's check.
//
// <tpipe/plan.hpp> is the planner without the runtime (no threads, coroutines, MPI or CUDA). The
// program prices one stage of GPT-3 44B on a V100 with the built-in analytic model and asks the
// TeraPipe DP how to cut an iteration of B sequences of L tokens on K stages into microbatches and
// token slices: the cut minimising T = sum_u t_u + (K-1) max_u t_u. It checks two things:
//   - the DP is exact: no other cut (every split of the batch, every shared token cut on the
//     G-token grid, 2^15 of them per split) has a smaller T;
//   - T is a makespan: the plan, turned into a GPipe program over its token slices, validated and
//     simulated with each unit's forward a third of its t and its backward the rest, finishes at
//     T (the forward wave ends on the last stage's last unit, where the backward wave starts:
//     sum f + (K-1) max f + sum b + (K-1) max b, which is T when f and b split every t alike).
//
//   build/examples/lesson_planning
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <tpipe/plan.hpp>

constexpr int K = 4;                             // pipeline stages
constexpr std::int64_t L = 2048, B = 2, G = 128;  // tokens per sequence, rows, slice granularity
static_assert(B == 2 && L / G <= 16, "the brute force below lists the splits of 2 rows and enumerates 2^(L/G-1) cuts");

std::string lengths(const std::vector<std::int64_t>& v)
{
    std::string s;
    for (auto x : v) {
        if (!s.empty()) s += ' ';
        s += std::to_string(x);
    }
    return s;
}

int main()
{
    const auto model = tpipe::presets::analytic(tpipe::presets::gpt3_44b, K, tpipe::presets::v100);
    const tpipe::slicing_problem problem{.stages = K, .seq_len = L, .batch = B, .granularity = G};
    const tpipe::slicing_plan plan = tpipe::plan_slices(model, problem);  // exact, in well under a second
    std::printf("GPT-3 44B on V100s, K=%d stages, B=%lld rows of L=%lld tokens, slices on a %lld-token grid\n", K,
                static_cast<long long>(B), static_cast<long long>(L), static_cast<long long>(G));
    std::printf("DP plan: microbatches of [%s] rows, token slices [%s]\n", lengths(plan.microbatches).c_str(),
                lengths(plan.slices.front()).c_str());
    std::printf("  T = %.6f s = sum %.6f s + %d x t_max %.6f s (solved in %.2g s)\n", plan.objective, plan.sum, K - 1,
                plan.t_max, plan.stats.solve_seconds);
    const auto uniform = tpipe::best_uniform(model, problem, plan.microbatches);
    const auto whole = tpipe::best_microbatch_only(model, problem);
    std::printf("  best uniform slices: %.6f s; whole sequences (microbatches only): %.6f s\n", uniform.objective,
                whole.objective);

    // Check 1: brute force over every shared cut of every split of B = 2 rows ([2] and [1 1]).
    const std::int64_t cells = L / G;  // a cut is a subset of the cells-1 inner grid points
    double least = INFINITY;
    for (const std::vector<std::int64_t>& rows : {std::vector<std::int64_t>{2}, std::vector<std::int64_t>{1, 1}})
        for (std::uint32_t mask = 0; mask < (1u << (cells - 1)); ++mask) {
            std::vector<std::int64_t> slices{G};
            for (std::int64_t i = 0; i + 1 < cells; ++i) {
                if (mask >> i & 1) slices.push_back(0);  // a cut after cell i
                slices.back() += G;
            }
            tpipe::slicing_plan other;
            other.stages = K, other.seq_len = L, other.microbatches = rows;
            other.slices.assign(rows.size(), slices);  // one shared cut
            least = std::min(least, tpipe::pipeline_objective(model, other.scheme(), K));
        }
    std::printf("brute force over 2 splits x %u shared cuts: least T = %.6f s\n", 1u << (cells - 1), least);
    if (plan.objective > least * (1 + 1e-12)) {
        std::printf("FAILED: the DP's plan (%.9f s) is worse than a cut the brute force found (%.9f s)\n",
                    plan.objective, least);
        return 1;
    }

    // Check 2: the plan as a program (GPipe's order over token slices), validated and simulated.
    const auto schedule = tpipe::over_tokens(tpipe::make_schedule("gpipe"));  // = "terapipe-gpipe"
    const tpipe::program prog = schedule.program(tpipe::topology{.ranks = K}, plan.scheme());
    tpipe::validate(prog);  // throws, naming the rank and the action, if the program is wrong
    const auto sim = tpipe::simulate(prog, tpipe::latency_costs{model, 1.0 / 3});  // F = t/3, B = 2t/3
    std::cout << tpipe::text_timeline(sim.events, sim.ranks);  // one line per rank; F0.1: microbatch 0, slice 1
    const double gap = std::abs(sim.makespan - plan.objective) / plan.objective;
    std::printf("%s: simulated makespan %.9f s, DP's T %.9f s (relative gap %.1e, bubble %.1f %%)\n",
                std::string(schedule.name()).c_str(), sim.makespan, plan.objective, gap, 100 * sim.bubble_fraction);
    if (!(gap <= 1e-9)) {
        std::printf("FAILED: the simulated makespan differs from the closed form by more than 1e-9 (relative)\n");
        return 1;
    }
    std::printf("the DP's plan is optimal, and the simulator agrees with its T\n");
    return 0;
}
