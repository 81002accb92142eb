// Runtime benchmarks (tpipe::run on tpipe::cpu_engine).
//
// BM_overhead/<schedule>/P/threading   empty stages, M = 4P: nanoseconds of runtime per action
//                                      (threading 0: cpu_engine's default, min(P, cores) loop threads;
//                                      1: one loop thread per rank; 2: all ranks on one loop thread)
// BM_efficiency/<schedule>/P/spin_us   stages that spin: simulated makespan / measured time (1.0 is perfect)
// BM_peer_tbb/P/spin_ns/one_worker     P serial stages, forward only, T tokens: tpipe vs oneTBB's
//                                      parallel_pipeline in the same run; per-token overhead (wall time of
//                                      the whole call on both sides, minus the ideal time) and ratio
#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/slice/slicers.hpp"

#include "runtime_fixture.hpp"

namespace {

using namespace tpipe_bench;

struct per_action_costs {
    double t = 0;
    double compute(tpipe::op kind, int, const tpipe::unit&) const { return tpipe::is_compute(kind) ? t : 0; }
    double transfer(tpipe::op, int, int, const tpipe::unit&) const { return 0; }
};

std::vector<std::string> names_cache = tpipe::schedule_names();

tpipe::program program_for(const std::string& name, int P, int M)
{
    const int slices = name.rfind("terapipe", 0) == 0 ? 2 : 1;
    return tpipe::lower(tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M, slices)));
}

enum threading : int { default_threads = 0, thread_per_rank = 1, one_thread = 2 };

//! BM_overhead: nanoseconds of runtime per action.
void overhead(benchmark::State& state)
{
    const std::string& name = names_cache[static_cast<std::size_t>(state.range(0))];
    const int P = static_cast<int>(state.range(1));
    const auto mode = static_cast<threading>(state.range(2));
    const auto prog = program_for(name, P, 4 * P);
    tpipe::cpu_engine::options eo;
    eo.threads = mode == thread_per_rank ? P : mode == one_thread ? 1 : 0;
    tpipe::cpu_engine eng(P, eo);
    std::size_t actions = 0;
    double inside = 0;
    with_warm_runner(prog, eng, tpipe::run_options{}, std::chrono::nanoseconds(0), [&](auto& r, const auto& io) {
        for (auto _ : state) {
            const auto s = r.run(io);
            actions += s.actions;
            inside += s.time;
        }
    });
    state.SetLabel(name + " " + std::to_string(eng.threads()) + (eng.threads() == 1 ? " thread" : " threads"));
    state.counters["actions"] = static_cast<double>(prog.size());
    // From the first action's start to the last action's end, per action.
    state.counters["ns_per_action"] = inside / static_cast<double>(actions) * 1e9;
    // Whole run() calls (waking the loops, starting the rank coroutines, waking the caller), per action.
    state.counters["call_ns_per_action"] =
        benchmark::Counter(static_cast<double>(actions), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_overhead(benchmark::State& state) { overhead(state); }

void BM_efficiency(benchmark::State& state)
{
    const std::string& name = names_cache[static_cast<std::size_t>(state.range(0))];
    const int P = static_cast<int>(state.range(1));
    const auto t = std::chrono::microseconds(state.range(2));
    const auto prog = program_for(name, P, 2 * P);
    const double makespan = tpipe::simulate(prog, per_action_costs{std::chrono::duration<double>(t).count()}).makespan;
    tpipe::cpu_engine eng(P);
    std::vector<double> measured;
    with_warm_runner(prog, eng, tpipe::run_options{}, t, [&](auto& r, const auto& io) {
        for (auto _ : state) {
            const double s = r.run(io).time;
            state.SetIterationTime(s);
            measured.push_back(s);
        }
    });
    state.SetLabel(name);
    const double mid = median(measured);  // as tpipe-plan run: one preempted iteration does not move it
    state.counters["simulated_ms"] = makespan * 1e3;
    state.counters["efficiency"] = makespan / mid;
    state.counters["overhead_ns_per_action"] = (mid - makespan) / static_cast<double>(prog.size()) * 1e9;
}

double tbb_pipeline_seconds(int P, int T, std::chrono::nanoseconds t, int lines)
{
    int next = 0;
    auto chain = tbb::make_filter<void, int>(tbb::filter_mode::serial_in_order, [&](tbb::flow_control& fc) -> int {
        if (next == T) {
            fc.stop();
            return 0;
        }
        spin(t);
        return next++;
    });
    for (int s = 1; s + 1 < P; ++s)
        chain = chain & tbb::make_filter<int, int>(tbb::filter_mode::serial_in_order, [t](int x) {
                    spin(t);
                    return x + 1;
                });
    int sink = 0;
    auto last = tbb::make_filter<int, void>(tbb::filter_mode::serial_in_order, [&, t](int x) {
        spin(t);
        sink += x;
    });
    const auto start = clock_type::now();
    tbb::parallel_pipeline(static_cast<std::size_t>(lines), chain & last);
    benchmark::DoNotOptimize(sink);
    return std::chrono::duration<double>(clock_type::now() - start).count();
}

void BM_peer_tbb(benchmark::State& state)
{
    const int P = static_cast<int>(state.range(0));
    const auto t = std::chrono::nanoseconds(state.range(1));
    const int T = 1000;
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    // 0: every core (oneTBB's default arena; tpipe's P devices on min(P, cores) loop threads);
    // 1: one worker on each side, which leaves placement and load balance out of the comparison.
    const int workers = state.range(2) == 0 ? cores : 1;
    std::optional<tbb::global_control> one_worker;
    if (workers == 1) one_worker.emplace(tbb::global_control::max_allowed_parallelism, 1);
    const auto prog = forward_only(P, T);
    tpipe::cpu_engine eng(P, {.threads = std::min(P, workers)});
    tpipe::run_options opts;
    opts.validate = false;  // forward only: no backward actions on purpose
    // Ideal time of T tokens through P serial stages of work t on `workers` workers.
    const double work = std::chrono::duration<double>(t).count();
    const double ideal = std::max((T + P - 1) * work, T * P * work / workers);
    std::vector<double> tp, ti, tb;
    with_warm_runner(prog, eng, opts, t, [&](auto& r, const auto& io) {
        tbb_pipeline_seconds(P, T, t, 2 * workers);
        for (auto _ : state) {
            // Wall time of the whole call on both sides, like for like.
            const auto start = clock_type::now();
            const double in = r.run(io).time;
            const double a = std::chrono::duration<double>(clock_type::now() - start).count();
            const double b = tbb_pipeline_seconds(P, T, t, 2 * workers);
            state.SetIterationTime(a);
            tp.push_back(a);
            ti.push_back(in);
            tb.push_back(b);
        }
    });
    // Medians: a preemption of one iteration (this machine is a shared VM) does not move them.
    const double per_tp = (median(tp) - ideal) / T * 1e9;
    const double per_tb = (median(tb) - ideal) / T * 1e9;
    const double per_ti = (median(ti) - ideal) / T * 1e9;
    state.SetLabel("tokens=" + std::to_string(T) + " threads=" + std::to_string(eng.threads()));
    state.counters["tpipe_overhead_ns_per_token"] = per_tp;
    state.counters["tbb_overhead_ns_per_token"] = per_tb;
    // Without the call's fixed costs (setup, waking the caller): first action to last.
    state.counters["tpipe_in_iteration_ns_per_token"] = per_ti;
    state.counters["ratio_tpipe_over_tbb"] = per_tb > 0 ? per_tp / per_tb : 0;
}

void overhead_args(benchmark::internal::Benchmark* b)
{
    for (int s = 0; s < static_cast<int>(names_cache.size()); ++s)
        for (int P = 2; P <= 8; ++P)
            for (int mode : {default_threads, thread_per_rank, one_thread}) b->Args({s, P, mode});
}

void efficiency_args(benchmark::internal::Benchmark* b)
{
    for (int s = 0; s < static_cast<int>(names_cache.size()); ++s) b->Args({s, 2, 1000});
}

} // namespace

BENCHMARK(BM_overhead)->Apply(overhead_args)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_efficiency)->Apply(efficiency_args)->UseManualTime()->Iterations(11)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_peer_tbb)
    ->ArgsProduct({{2, 4, 8}, {0, 1000}, {0, 1}})
    ->UseManualTime()
    ->MinTime(0.5)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
