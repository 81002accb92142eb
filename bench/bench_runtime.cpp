// Runtime benchmarks (tpipe::run on tpipe::cpu_engine).
//
// BM_overhead/<schedule>/P/placement   empty stages: nanoseconds of runtime per action
//                                      (placement 0: one loop thread per rank; 1: all ranks on one loop)
// BM_efficiency/<schedule>/P/spin_us   stages that spin: simulated makespan / measured time (1.0 is perfect)
// BM_peer_tbb/P/spin_ns                P serial stages, forward only, T tokens: tpipe vs oneTBB's
//                                      parallel_pipeline in the same run; per-token overhead and ratio
#include <benchmark/benchmark.h>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

inline void spin(std::chrono::nanoseconds d)
{
    if (d.count() <= 0) return;
    const auto until = clock_type::now() + d;
    while (clock_type::now() < until) {
    }
}

struct spin_stage {
    using input = int;
    using output = int;
    std::chrono::nanoseconds t{0};
    int forward(const tpipe::unit&, int x)
    {
        spin(t);
        return x + 1;
    }
    int backward(const tpipe::unit&, int g)
    {
        spin(t);
        return g;
    }
    int backward_input(const tpipe::unit&, int g)
    {
        spin(t);
        return g;
    }
    void backward_weight(const tpipe::unit&) { spin(t); }
};

struct per_action_costs {
    double t = 0;
    double compute(tpipe::op kind, int, const tpipe::unit&) const { return tpipe::is_compute(kind) ? t : 0; }
    double transfer(tpipe::op, int, int, const tpipe::unit&) const { return 0; }
};

constexpr std::size_t max_stages = 16;

//! Calls f(pipeline of n spin stages) for a run-time n.
template <class F, std::size_t... N>
void with_spin_pipeline(int n, std::chrono::nanoseconds t, F&& f, std::index_sequence<N...>)
{
    auto one = [&]<std::size_t... I>(std::index_sequence<I...>) {
        auto pipe = tpipe::pipeline(((void)I, spin_stage{t})...);
        f(pipe);
    };
    ((n == static_cast<int>(N + 1) ? (one(std::make_index_sequence<N + 1>{}), true) : false), ...);
}

std::vector<std::string> names_cache = tpipe::schedule_names();

tpipe::program program_for(const std::string& name, int P)
{
    const int slices = name.rfind("terapipe", 0) == 0 ? 2 : 1;
    return tpipe::lower(tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(2 * P, slices)));
}

//! Blocked placement of P ranks on D devices: rank r on device r*D/P.
std::vector<int> blocked(int P, int D)
{
    std::vector<int> d;
    for (int r = 0; r < P; ++r) d.push_back(r * D / P);
    return d;
}

void BM_overhead(benchmark::State& state)
{
    const std::string& name = names_cache[static_cast<std::size_t>(state.range(0))];
    const int P = static_cast<int>(state.range(1));
    const bool one_loop = state.range(2) != 0;
    const auto prog = program_for(name, P);
    tpipe::cpu_engine eng(one_loop ? 1 : P);
    tpipe::run_options opts;
    opts.device_of_rank.assign(static_cast<std::size_t>(P), 0);
    if (!one_loop)
        for (int r = 0; r < P; ++r) opts.device_of_rank[r] = r;
    std::size_t actions = 0;
    with_spin_pipeline(
        prog.stages(), std::chrono::nanoseconds(0),
        [&](auto& pipe) {
            tpipe::runner r(pipe, prog, eng, opts);
            tpipe::io_for<std::remove_reference_t<decltype(pipe)>> io;
            io.source = [](const tpipe::unit& u) { return u.microbatch; };
            r.run(io);
            for (auto _ : state) actions += r.run(io).actions;
        },
        std::make_index_sequence<max_stages>{});
    state.SetLabel(name + (one_loop ? " one loop" : " loop per rank"));
    state.counters["actions"] = static_cast<double>(prog.size());
    state.counters["ns_per_action"] =
        benchmark::Counter(static_cast<double>(actions), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void BM_efficiency(benchmark::State& state)
{
    const std::string& name = names_cache[static_cast<std::size_t>(state.range(0))];
    const int P = static_cast<int>(state.range(1));
    const auto t = std::chrono::microseconds(state.range(2));
    const auto prog = program_for(name, P);
    const double makespan = tpipe::simulate(prog, per_action_costs{std::chrono::duration<double>(t).count()}).makespan;
    tpipe::cpu_engine eng(P);
    double measured = 0;
    std::size_t n = 0;
    with_spin_pipeline(
        prog.stages(), t,
        [&](auto& pipe) {
            tpipe::runner r(pipe, prog, eng);
            tpipe::io_for<std::remove_reference_t<decltype(pipe)>> io;
            io.source = [](const tpipe::unit& u) { return u.microbatch; };
            r.run(io);
            for (auto _ : state) {
                const double s = r.run(io).time;
                state.SetIterationTime(s);
                measured += s;
                ++n;
            }
        },
        std::make_index_sequence<max_stages>{});
    state.SetLabel(name);
    const double mean = measured / static_cast<double>(n);
    state.counters["simulated_ms"] = makespan * 1e3;
    state.counters["efficiency"] = makespan / mean;
    state.counters["overhead_ns_per_action"] = (mean - makespan) / static_cast<double>(prog.size()) * 1e9;
}

//! Forward-only program: P ranks, stage r on rank r, T units; each token flows 0 -> P-1.
tpipe::program forward_only(int P, int T)
{
    tpipe::program p;
    p.ranks = P;
    p.stage_rank.clear();
    for (int r = 0; r < P; ++r) p.stage_rank.push_back(r);
    p.units = tpipe::microbatches(T);
    p.actions.assign(static_cast<std::size_t>(P), {});
    for (int r = 0; r < P; ++r)
        for (int u = 0; u < T; ++u) {
            if (r > 0) p.actions[r].push_back({r, tpipe::op::RECV_F, u, 0});
            p.actions[r].push_back({r, tpipe::op::F, u, 0});
            if (r + 1 < P) p.actions[r].push_back({r, tpipe::op::SEND_F, u, 0});
        }
    return p;
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
    const int D = std::min(P, cores);
    const auto prog = forward_only(P, T);
    tpipe::cpu_engine eng(D);
    tpipe::run_options opts;
    opts.validate = false;  // forward only: no backward actions on purpose
    opts.device_of_rank = blocked(P, D);
    // Ideal time of T tokens through P serial stages of work t on `cores` workers.
    const double work = std::chrono::duration<double>(t).count();
    const double ideal = std::max((T + P - 1) * work, T * P * work / cores);
    double tp = 0, tb = 0;
    std::size_t n = 0;
    with_spin_pipeline(
        P, t,
        [&](auto& pipe) {
            tpipe::runner r(pipe, prog, eng, opts);
            tpipe::io_for<std::remove_reference_t<decltype(pipe)>> io;
            io.source = [](const tpipe::unit& u) { return u.microbatch; };
            r.run(io);
            tbb_pipeline_seconds(P, T, t, 2 * cores);
            for (auto _ : state) {
                const double a = r.run(io).time;
                const double b = tbb_pipeline_seconds(P, T, t, 2 * cores);
                state.SetIterationTime(a);
                tp += a;
                tb += b;
                ++n;
            }
        },
        std::make_index_sequence<max_stages>{});
    const double per_tp = (tp / static_cast<double>(n) - ideal) / T * 1e9;
    const double per_tb = (tb / static_cast<double>(n) - ideal) / T * 1e9;
    state.SetLabel("tokens=" + std::to_string(T) + " threads=" + std::to_string(D));
    state.counters["tpipe_overhead_ns_per_token"] = per_tp;
    state.counters["tbb_overhead_ns_per_token"] = per_tb;
    state.counters["ratio_tpipe_over_tbb"] = per_tb > 0 ? per_tp / per_tb : 0;
}

void overhead_args(benchmark::internal::Benchmark* b)
{
    for (int s = 0; s < static_cast<int>(names_cache.size()); ++s)
        for (int P = 2; P <= 8; ++P)
            for (int placement = 0; placement <= 1; ++placement) b->Args({s, P, placement});
}

void efficiency_args(benchmark::internal::Benchmark* b)
{
    for (int s = 0; s < static_cast<int>(names_cache.size()); ++s) b->Args({s, 2, 1000});
}

} // namespace

BENCHMARK(BM_overhead)->Apply(overhead_args)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_efficiency)->Apply(efficiency_args)->UseManualTime()->Iterations(10)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_peer_tbb)
    ->ArgsProduct({{2, 4, 8}, {0, 1000}})
    ->UseManualTime()
    ->MinTime(0.2)
    ->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
