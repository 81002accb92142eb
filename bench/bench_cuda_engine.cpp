// CUDA engine benchmarks (need a GPU; without one every benchmark reports why and is skipped).
//
// BM_action_overhead/<schedule>/P   empty kernels, P ranks on GPU 0 (a stream each), M = 4P:
//                                   microseconds per compute action of tpipe::run on cuda::engine,
//                                   vs the same number of empty kernels launched back to back on
//                                   one stream, vs a CUDA graph of them; ratios from the same run
// BM_overlap/MiB/busy_us            a device-to-device copy of MiB on the transfer stream while a
//                                   kernel busy for busy_us runs on the compute stream: time of
//                                   both vs each alone; overlap = (copy + kernel - both) / min
//                                   (1.0: fully overlapped, 0: serialized)
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "stage_kernels.hpp"
#include "tpipe/cuda/availability.hpp"
#include "tpipe/cuda/engine.hpp"
#include "tpipe/cuda/error_macros.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/lower.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct empty_stage {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x)
    {
        kernels::empty(tpipe::cuda::current_stream());
        return x;
    }
    int backward(const tpipe::unit&, int g)
    {
        kernels::empty(tpipe::cuda::current_stream());
        return g;
    }
};

void BM_action_overhead(benchmark::State& state, const std::string& schedule)
{
    if (const auto why = tpipe::cuda::why_no_gpu()) {
        state.SkipWithError(("no CUDA device: " + *why).c_str());
        return;
    }
    const int P = static_cast<int>(state.range(0));
    const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{P}, tpipe::microbatches(4 * P));
    std::size_t computes = 0;
    for (const auto& row : prog.actions)
        for (const auto& a : row) computes += tpipe::is_compute(a.kind) ? 1 : 0;
    tpipe::cuda::engine eng({.gpu_of_device = std::vector<int>(static_cast<std::size_t>(P), 0)});
    tpipe::uniform_pipeline<empty_stage> pipe(std::vector<empty_stage>(static_cast<std::size_t>(prog.stages())));
    tpipe::runner<decltype(pipe), tpipe::cuda::engine> run(pipe, prog, eng);
    tpipe::run_io<int, int> io;
    io.source = [](const tpipe::unit&) { return 0; };

    // The peers: the same number of empty kernels on one stream, launched, and as one graph.
    cudaStream_t s{};
    TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaGraph_t graph{};
    cudaGraphExec_t exec{};
    TPIPE_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (std::size_t i = 0; i < computes; ++i) kernels::empty(s);
    TPIPE_CUDA_TRY(cudaStreamEndCapture(s, &graph));
    TPIPE_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    run.run(io);  // warm: pools, loops, module load
    double t_tpipe = 0, t_stream = 0, t_graph = 0;
    for (auto _ : state) {
        auto t0 = clock_type::now();
        run.run(io);
        t_tpipe += seconds_since(t0);
        t0 = clock_type::now();
        for (std::size_t i = 0; i < computes; ++i) kernels::empty(s);
        TPIPE_CUDA_TRY(cudaStreamSynchronize(s));
        t_stream += seconds_since(t0);
        t0 = clock_type::now();
        TPIPE_CUDA_TRY(cudaGraphLaunch(exec, s));
        TPIPE_CUDA_TRY(cudaStreamSynchronize(s));
        t_graph += seconds_since(t0);
    }
    const double n = static_cast<double>(state.iterations()) * static_cast<double>(computes);
    state.counters["computes"] = static_cast<double>(computes);
    state.counters["tpipe_us_per_action"] = t_tpipe / n * 1e6;
    state.counters["stream_us_per_launch"] = t_stream / n * 1e6;
    state.counters["graph_us_per_launch"] = t_graph / n * 1e6;
    state.counters["ratio_tpipe_over_stream"] = t_stream > 0 ? t_tpipe / t_stream : 0;
    state.counters["ratio_tpipe_over_graph"] = t_graph > 0 ? t_tpipe / t_graph : 0;
    TPIPE_CUDA_LOG(cudaGraphExecDestroy(exec));
    TPIPE_CUDA_LOG(cudaGraphDestroy(graph));
    TPIPE_CUDA_LOG(cudaStreamDestroy(s));
}

void BM_overlap(benchmark::State& state)
{
    if (const auto why = tpipe::cuda::why_no_gpu()) {
        state.SkipWithError(("no CUDA device: " + *why).c_str());
        return;
    }
    const std::size_t bytes = static_cast<std::size_t>(state.range(0)) << 20;
    const double busy_us = static_cast<double>(state.range(1));
    tpipe::cuda::engine eng({.gpu_of_device = {0}});
    const cudaStream_t compute = eng.compute_stream(0), transfer = eng.transfer_stream(0);
    auto src = eng.memory().allocate(bytes, 0, transfer);
    auto dst = eng.memory().allocate(bytes, 0, transfer);
    int khz = 0;
    TPIPE_CUDA_TRY(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
    const long long cycles = static_cast<long long>(busy_us * 1e-3 * khz);
    auto copy = [&] { TPIPE_CUDA_TRY(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, transfer)); };
    auto kernel = [&] { kernels::busy(cycles, compute); };
    auto sync = [&] {
        TPIPE_CUDA_TRY(cudaStreamSynchronize(transfer));
        TPIPE_CUDA_TRY(cudaStreamSynchronize(compute));
    };
    copy();
    kernel();
    sync();
    double t_copy = 0, t_kernel = 0, t_both = 0;
    for (auto _ : state) {
        auto t0 = clock_type::now();
        copy();
        sync();
        t_copy += seconds_since(t0);
        t0 = clock_type::now();
        kernel();
        sync();
        t_kernel += seconds_since(t0);
        t0 = clock_type::now();
        kernel();
        copy();
        sync();
        t_both += seconds_since(t0);
    }
    const double it = static_cast<double>(state.iterations());
    state.counters["copy_us"] = t_copy / it * 1e6;
    state.counters["kernel_us"] = t_kernel / it * 1e6;
    state.counters["both_us"] = t_both / it * 1e6;
    state.counters["overlap"] = (t_copy + t_kernel - t_both) / std::min(t_copy, t_kernel);
}

void overhead_args(benchmark::internal::Benchmark* b)
{
    for (int P : {2, 4}) b->Arg(P);
}

} // namespace

BENCHMARK_CAPTURE(BM_action_overhead, gpipe, std::string("gpipe"))->Apply(overhead_args)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_action_overhead, 1f1b, std::string("1f1b"))->Apply(overhead_args)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_overlap)->Args({64, 200})->Args({256, 1000})->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
