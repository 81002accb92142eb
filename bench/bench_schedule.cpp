// Program generation, validation and simulation at large sizes (P = 64 ranks, M = 1024
// microbatches): the planning half must stay cheap enough to re-plan online.
#include <benchmark/benchmark.h>

#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

const char* const names[] = {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "terapipe-1f1b"};

tpipe::program make(int which, int P, int M)
{
    return tpipe::make_schedule(names[which], 2).program(tpipe::topology{P}, tpipe::microbatches(M));
}

void set_counters(benchmark::State& state, const tpipe::program& p)
{
    state.counters["actions"] = static_cast<double>(p.size());
    state.counters["ns_per_action"] = benchmark::Counter(static_cast<double>(p.size()),
                                                         benchmark::Counter::kIsIterationInvariantRate |
                                                             benchmark::Counter::kInvert);
    state.SetLabel(names[state.range(0)]);
}

void generate(benchmark::State& state)
{
    const int P = static_cast<int>(state.range(1)), M = static_cast<int>(state.range(2));
    tpipe::program p;
    for (auto _ : state) {
        p = make(static_cast<int>(state.range(0)), P, M);
        benchmark::DoNotOptimize(p.actions.data());
    }
    set_counters(state, p);
}

void lower_and_validate(benchmark::State& state)
{
    const auto p = make(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                        static_cast<int>(state.range(2)));
    for (auto _ : state) {
        const auto low = tpipe::lower(p);
        if (!tpipe::valid(low)) state.SkipWithError("invalid program");
    }
    set_counters(state, tpipe::lower(p));
}

void simulate(benchmark::State& state)
{
    const auto p = tpipe::lower(make(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)),
                                     static_cast<int>(state.range(2))));
    for (auto _ : state) {
        auto sim = tpipe::simulate(p, tpipe::uniform_costs{1, 1, 1, 0.1, 0});
        benchmark::DoNotOptimize(sim.makespan);
    }
    set_counters(state, p);
}

void args(benchmark::internal::Benchmark* b)
{
    for (int s = 0; s < 6; ++s) b->Args({s, 64, 1024});
    b->Unit(benchmark::kMillisecond);
}

} // namespace

BENCHMARK(generate)->Apply(args);
BENCHMARK(lower_and_validate)->Apply(args);
BENCHMARK(simulate)->Apply(args);
BENCHMARK_MAIN();
