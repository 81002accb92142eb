// Planner speed: tpipe's exact slicing DP, and beside it the same inputs solved by our
// re-implementation of the official TeraPipe algorithm (bench/terapipe_reference_dp.hpp).
//
// Each BM_plan case reports counters:
//   units        units of the chosen scheme;   objective  its T in seconds
//   official_s   seconds the official algorithm took on the same input (timed once; only where
//                it finishes in reasonable time: n = L/G <= 512)
//   speedup      official_s / our mean time
//   official_gap official objective / ours - 1 (> 0: the official epsilon-skip lost optimality)
//
// Models (roofline form): the analytic GPT-3 175B (96 layers over K stages, tensor parallel 8, V100, 25 Gbit/s
// links: TeraPipe's setting), and GPT-3 1B on H200, whose sub-millisecond stage times expose
// the official epsilon-skip.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <tuple>

#include "terapipe_reference_dp.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/slicing_dp.hpp"

namespace {

enum model_id : int { gpt3_175b_v100 = 0, gpt3_1b_h200 = 1 };

// The roofline form: docs/planner.md's speed table was measured on it; the calibrated form's
// plans differ in slice counts, so its timings would not compare with that table.
tpipe::analytic_latency model_for(int id, int stages)
{
    namespace P = tpipe::presets;
    constexpr auto roofline = tpipe::analytic_form::roofline;
    if (id == gpt3_1b_h200) return P::analytic(P::gpt3_1b, stages, P::h200, {.form = roofline});
    return P::analytic(P::gpt3_175b, stages, P::v100, {.tensor_parallel = 8, .form = roofline});
}

// args: K, L, B, G, mode (0 shared, 1 per-microbatch), model, compare with official (0/1)
void BM_plan(benchmark::State& state)
{
    const int K = static_cast<int>(state.range(0));
    const std::int64_t L = state.range(1), B = state.range(2), G = state.range(3);
    const auto mode = state.range(4) ? tpipe::cut_mode::per_microbatch : tpipe::cut_mode::shared;
    const auto model = model_for(static_cast<int>(state.range(5)), K);
    const tpipe::slicing_problem problem{K, L, B, G, mode};

    tpipe::slicing_plan plan;
    const auto start = std::chrono::steady_clock::now();
    for (auto _ : state) {
        plan = tpipe::plan_slices(model, problem);
        benchmark::DoNotOptimize(plan.objective);
    }
    const double ours = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                        static_cast<double>(state.iterations());
    state.counters["units"] = static_cast<double>(plan.units());
    state.counters["objective"] = plan.objective;
    state.counters["caps"] = static_cast<double>(plan.stats.caps_evaluated);

    if (state.range(6)) {
        // The official algorithm plans independent cuts per microbatch size (PR #41).
        const auto t0 = std::chrono::steady_clock::now();
        const auto ref = tpipe::bench::reference_terapipe_dp(model, K, L, B, G);
        const double official = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        state.counters["official_s"] = official;
        state.counters["speedup"] = official / ours;
        state.counters["official_gap"] = ref.objective / plan.objective - 1.0;
        state.counters["official_caps"] = static_cast<double>(ref.caps_evaluated);
    }
}

// K, L, B, G, mode, model, official
BENCHMARK(BM_plan)
    ->ArgNames({"K", "L", "B", "G", "per_mb", "model", "official"})
    // the targets: 1-token granularity at L = 2048
    ->Args({2, 2048, 1, 1, 0, gpt3_175b_v100, 0})
    ->Args({8, 2048, 1, 1, 0, gpt3_175b_v100, 0})
    ->Args({48, 2048, 1, 1, 0, gpt3_175b_v100, 0})
    // long sequences
    ->Args({2, 32768, 1, 16, 0, gpt3_175b_v100, 0})
    ->Args({8, 32768, 1, 16, 0, gpt3_175b_v100, 0})
    ->Args({48, 32768, 1, 16, 0, gpt3_175b_v100, 0})
    // against the official algorithm at its own granularity (8 tokens)
    ->Args({2, 2048, 1, 8, 1, gpt3_175b_v100, 1})
    ->Args({8, 2048, 1, 8, 1, gpt3_175b_v100, 1})
    ->Args({48, 2048, 1, 8, 1, gpt3_175b_v100, 1})
    ->Args({8, 2048, 1, 8, 1, gpt3_1b_h200, 1})
    // and at 4 tokens (n = 512), where the official algorithm's n^4 starts to show
    ->Args({8, 2048, 1, 4, 1, gpt3_175b_v100, 1})
    ->Args({48, 2048, 1, 4, 1, gpt3_175b_v100, 1})
    // joint rows x tokens, B = 8
    ->Args({2, 2048, 8, 8, 0, gpt3_175b_v100, 0})
    ->Args({8, 2048, 8, 8, 0, gpt3_175b_v100, 0})
    ->Args({48, 2048, 8, 8, 0, gpt3_175b_v100, 0})
    ->Args({2, 2048, 8, 8, 1, gpt3_175b_v100, 1})
    ->Args({8, 2048, 8, 8, 1, gpt3_175b_v100, 1})
    ->Args({48, 2048, 8, 8, 1, gpt3_175b_v100, 1})
    ->Args({8, 2048, 8, 8, 1, gpt3_1b_h200, 1})
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.3);

} // namespace

BENCHMARK_MAIN();
