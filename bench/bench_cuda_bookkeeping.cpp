// The CUDA engine's host-side bookkeeping, on the CPU: tpipe::run of empty stages on
// cuda::basic_engine over the test double of the driver (tests/cuda/fake_driver.hpp), whose
// kernels complete as they are enqueued, vs tpipe::cpu_engine in the same run. What the ratio
// covers: per compute action, making the GPU current, the compute context, cudaGetLastError, an
// event from the pool, its record and query (event_poll), or a host function and one more
// loop hop (host_func) -- plus the fake driver's own mutex per call, so it bounds the engine's
// bookkeeping from above. The GPU's share is in bench_cuda_engine.
//
// BM_bookkeeping/<schedule>/P/mode   mode 0: event_poll, 1: host_func; counters: ns per action
//                                    on each engine and their ratio
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "../tests/cuda/fake_driver.hpp"
#include "tpipe/cuda/basic_current.hpp"
#include "tpipe/cuda/basic_engine.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

fake::driver* the_driver = nullptr;

struct empty_stage {
    using input = int;
    using output = int;
    static void kernel()
    {
        if (auto* c = tpipe::cuda::detail::current_context<fake::driver>) the_driver->launch(c->stream);
    }
    int forward(const tpipe::unit&, int x)
    {
        kernel();
        return x;
    }
    int backward(const tpipe::unit&, int g)
    {
        kernel();
        return g;
    }
};

void BM_bookkeeping(benchmark::State& state, const std::string& schedule)
{
    const int P = static_cast<int>(state.range(0));
    const auto mode = state.range(1) == 0 ? tpipe::cuda::completion_mode::event_poll : tpipe::cuda::completion_mode::host_func;
    fake::driver d(1);
    d.set_immediate(true);
    the_driver = &d;
    const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{P}, tpipe::microbatches(4 * P));
    tpipe::cpu_engine cpu(P);
    // The same loop threads on both sides (cpu_engine: at most one per core).
    tpipe::cuda::basic_engine<fake::driver> gpu(
        d, {.gpu_of_device = std::vector<int>(static_cast<std::size_t>(P), 0), .threads = cpu.threads(), .completion = mode});
    tpipe::uniform_pipeline<empty_stage> pipe(std::vector<empty_stage>(static_cast<std::size_t>(prog.stages())));
    tpipe::runner<decltype(pipe), tpipe::cuda::basic_engine<fake::driver>> on_gpu(pipe, prog, gpu);
    tpipe::runner<decltype(pipe), tpipe::cpu_engine> on_cpu(pipe, prog, cpu);
    tpipe::run_io<int, int> io;
    io.source = [](const tpipe::unit&) { return 0; };
    on_gpu.run(io);
    on_cpu.run(io);
    double t_gpu = 0, t_cpu = 0;
    for (auto _ : state) {
        auto t0 = clock_type::now();
        on_gpu.run(io);
        t_gpu += std::chrono::duration<double>(clock_type::now() - t0).count();
        t0 = clock_type::now();
        on_cpu.run(io);
        t_cpu += std::chrono::duration<double>(clock_type::now() - t0).count();
    }
    const double n = static_cast<double>(state.iterations()) * static_cast<double>(tpipe::lower(prog).size());
    state.counters["cuda_fake_ns_per_action"] = t_gpu / n * 1e9;
    state.counters["cpu_ns_per_action"] = t_cpu / n * 1e9;
    state.counters["ratio_cuda_fake_over_cpu"] = t_cpu > 0 ? t_gpu / t_cpu : 0;
    the_driver = nullptr;
}

void args(benchmark::internal::Benchmark* b)
{
    for (int P : {2, 4})
        for (int mode : {0, 1}) b->Args({P, mode});
}

} // namespace

BENCHMARK_CAPTURE(BM_bookkeeping, 1f1b, std::string("1f1b"))->Apply(args)->MinTime(0.2)->UseRealTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
