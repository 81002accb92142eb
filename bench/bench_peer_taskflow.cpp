// tpipe's hot path against Taskflow's pipeline, in one run. Built only when CMake is given a
// Taskflow checkout (-DTPIPE_TASKFLOW_DIR=/path/to/taskflow, header-only; never committed here).
//
// BM_peer_taskflow<P>/spin_ns/workers   P serial stages, forward only, T tokens, each stage `spin_ns`
//   of work: tpipe (the forward-only program on cpu_engine, P devices on min(P, workers) loop
//   threads) and tf::Pipeline (P serial pipes, 2 x workers lines, an executor of `workers`
//   threads), alternating. Counters: wall time of the whole call minus the ideal time, per token
//   and stage (ns per stage-hop), on each side, and their ratio (medians of the iterations).
#include <benchmark/benchmark.h>

#include <taskflow/algorithm/pipeline.hpp>
#include <taskflow/taskflow.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <utility>
#include <string>
#include <vector>

#include "runtime_fixture.hpp"
#include "tpipe/exec/run.hpp"

namespace {

using namespace tpipe_bench;

//! The first pipe: ends the pipeline after T tokens.
struct source_pipe {
    int T;
    std::chrono::nanoseconds t;
    void operator()(tf::Pipeflow& pf) const
    {
        if (pf.token() == static_cast<std::size_t>(T)) {
            pf.stop();
            return;
        }
        spin(t);
    }
};
struct filter_pipe {
    std::chrono::nanoseconds t;
    void operator()(tf::Pipeflow&) const { spin(t); }
};
template <std::size_t>
using filter = tf::Pipe<filter_pipe>;

//! A Taskflow pipeline (tf::Pipeline, its pipes known at compile time) of P serial pipes that
//! carries T tokens, each pipe spinning for t.
template <int P, class = std::make_index_sequence<P - 1>>
class taskflow_pipeline;
template <int P, std::size_t... I>
class taskflow_pipeline<P, std::index_sequence<I...>> {
public:
    taskflow_pipeline(int T, std::chrono::nanoseconds t, int workers)
        : executor_(static_cast<std::size_t>(workers)),
          pipeline_(static_cast<std::size_t>(2 * workers), tf::Pipe{tf::PipeType::SERIAL, source_pipe{T, t}},
                    filter<I>{tf::PipeType::SERIAL, filter_pipe{t}}...)
    {
        flow_.composed_of(pipeline_);
    }

    //! Seconds to carry the T tokens, from the call to the end.
    double seconds()
    {
        pipeline_.reset();
        const auto start = clock_type::now();
        executor_.run(flow_).wait();
        return std::chrono::duration<double>(clock_type::now() - start).count();
    }

private:
    tf::Executor executor_;
    tf::Pipeline<tf::Pipe<source_pipe>, filter<I>...> pipeline_;
    tf::Taskflow flow_;
};

template <int P>
void BM_peer_taskflow(benchmark::State& state)
{
    const auto t = std::chrono::nanoseconds(state.range(0));
    const int workers = static_cast<int>(state.range(1));
    const int T = 1000;
    const auto prog = forward_only(P, T);
    tpipe::cpu_engine eng(P, {.threads = std::min(P, workers)});
    tpipe::run_options opts;
    opts.validate = false;  // forward only: no backward actions on purpose
    taskflow_pipeline<P> tf_pipe(T, t, workers);
    // Ideal time of T tokens through P serial stages of work t on `workers` workers.
    const double work = std::chrono::duration<double>(t).count();
    const double ideal = std::max((T + P - 1) * work, T * P * work / workers);
    std::vector<double> tp, tb;
    with_warm_runner(prog, eng, opts, t, [&](auto& r, const auto& io) {
        for (int i = 0; i < 20; ++i) tf_pipe.seconds();  // Taskflow's workers warm too
        for (auto _ : state) {
            const auto start = clock_type::now();
            r.run(io);
            const double a = std::chrono::duration<double>(clock_type::now() - start).count();
            const double b = tf_pipe.seconds();
            state.SetIterationTime(a);
            tp.push_back(a);
            tb.push_back(b);
        }
    });
    const double hops = static_cast<double>(T) * P;
    const double per_tp = (median(tp) - ideal) / hops * 1e9;
    const double per_tf = (median(tb) - ideal) / hops * 1e9;
    state.SetLabel("tokens=" + std::to_string(T) + " workers=" + std::to_string(workers));
    state.counters["tpipe_ns_per_hop"] = per_tp;
    state.counters["taskflow_ns_per_hop"] = per_tf;
    state.counters["ratio_tpipe_over_taskflow"] = per_tf > 0 ? per_tp / per_tf : 0;
}

} // namespace

#define TPIPE_PEER_TASKFLOW(P)                                                                          \
    BENCHMARK_TEMPLATE(BM_peer_taskflow, P)->ArgsProduct({{0, 1000}, {1, 2}})->UseManualTime()->Iterations(51)->Unit(benchmark::kMillisecond)
TPIPE_PEER_TASKFLOW(2);
TPIPE_PEER_TASKFLOW(4);
TPIPE_PEER_TASKFLOW(8);

BENCHMARK_MAIN();
