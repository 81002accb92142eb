// The CUDA GPT on one GPU (needs a GPU; without one every benchmark reports why and is skipped).
//
// BM_gpt_cuda_fp32/<schedule>_<slicer>/P   a GPT (d 768, 12 heads, 8 layers, 8 x 512 tokens) cut into P
//   stages on GPU 0, one compute stream each, trained forward + backward by tpipe::run on
//   cuda::engine, against its peer in the same run: the same parts, units and kernels enqueued in
//   order on one stream, captured once into a CUDA graph and replayed (no launch or runtime
//   overhead, no overlap between stages). Counters: tokens/s of each, and pipelined_over_graph
//   (tokens/s ratio; the goal is >= 0.95). Both sides upload nothing per iteration but the
//   pipelined side's batch tokens (begin_step), which is part of a training step.
//   BM_gpt_cuda_bf16: the same with bf16 storage (no optimizer step runs, so neither side
//   converts the weights again after the first iteration).
#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <chrono>
#include <string>
#include <vector>

#include "tpipe/cuda/availability.hpp"
#include <tpipe/cuda/engine.hpp>
#include <tpipe/cuda/error_macros.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "gpt_cuda/pipeline.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

gpt::config bench_config()
{
    gpt::config c;
    c.vocab = 256;
    c.d_model = 768;
    c.heads = 12;
    c.layers = 8;
    c.seq_len = 512;
    return c;
}
constexpr int bench_rows = 8;

tpipe::scheme bench_units(const std::string& slicer, const tpipe::batch_shape& shape)
{
    if (slicer == "microbatch") return tpipe::microbatch_slicer{8}.scheme(shape);
    return tpipe::grid_slicer{4, {192, 160, 160}}.scheme(shape);  // TeraPipe-style: later slices shorter
}

struct owned_stream {
    cudaStream_t s{};
    owned_stream() { TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
    ~owned_stream() { cudaStreamDestroy(s); }
};

//! The peer: the pipeline's parts on one stream, one iteration captured as a CUDA graph.
template <class S>
class graph_peer {
public:
    graph_peer(const gpt::parameters<float>& host, int stages, const tpipe::scheme& units, const gpt::batch& b)
        : pool_(tpipe::cuda::make_memory_pool()), params_(host, {&pool_, 0}, s_.s), units_(units), b_(b)
    {
        const auto cuts = gpt::even_layer_cuts(host.cfg.layers, stages);
        for (int i = 0; i < stages; ++i)
            parts_.push_back(
                std::make_unique<part>(params_, cuts[i], cuts[i + 1], i == 0, i + 1 == stages, s_.s));
        for (auto& p : parts_) views_.push_back(p.get());
        params_.template refresh<S>(s_.s);
        for (auto* p : views_) p->begin(&b_);  // uploads the batch and waits: before any capture
        enqueue();  // warm-up: the pool then holds every block the captured iteration takes (same stream)
        TPIPE_CUDA_TRY(cudaStreamSynchronize(s_.s));
        TPIPE_CUDA_TRY(cudaStreamBeginCapture(s_.s, cudaStreamCaptureModeRelaxed));
        enqueue();
        cudaGraph_t graph{};
        TPIPE_CUDA_TRY(cudaStreamEndCapture(s_.s, &graph));
        TPIPE_CUDA_TRY(cudaGraphInstantiate(&exec_, graph, 0));
        TPIPE_CUDA_TRY(cudaGraphDestroy(graph));
    }
    ~graph_peer()
    {
        if (exec_) cudaGraphExecDestroy(exec_);
    }
    //! One iteration: the graph, waited for.
    void run()
    {
        TPIPE_CUDA_TRY(cudaGraphLaunch(exec_, s_.s));
        TPIPE_CUDA_TRY(cudaStreamSynchronize(s_.s));
    }

private:
    //! One iteration's kernels on s_ (an iteration leaves the parts ready for the next one).
    void enqueue()
    {
        params_.zero_grad(s_.s);
        gpt::cuda::enqueue_in_order(views_, units_, [](part&) {});
    }
    // The captured iteration's buffers go back to the pool when it ends; nothing else allocates from
    // this pool afterwards, so the replays find them where the graph expects them.
    owned_stream s_;
    tpipe::cuda::memory_pool pool_;
    gpt::cuda::parameters params_;
    tpipe::scheme units_;
    gpt::batch b_;
    using part = gpt::cuda::basic_part<gpt::cuda::device_backend, S>;
    std::vector<std::unique_ptr<part>> parts_;
    std::vector<part*> views_;
    cudaGraphExec_t exec_{};
};

template <class S>
void BM_gpt_cuda(benchmark::State& state, const std::string& schedule, const std::string& slicer)
{
    if (const auto why = tpipe::cuda::why_no_gpu()) {
        state.SkipWithError(("no CUDA device: " + *why).c_str());
        return;
    }
    try {
        const int P = static_cast<int>(state.range(0));
        const auto cfg = bench_config();
        gpt::parameters<float> host(cfg);
        host.init(1);
        const tpipe::batch_shape shape{bench_rows, cfg.seq_len};
        const auto units = bench_units(slicer, shape);
        std::uint64_t rng = 7;
        std::string text(4096, 'a');
        for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>('a' + (i * 7919) % 26);
        const auto b = gpt::sample_batch(text, bench_rows, cfg.seq_len, rng);
        const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{.ranks = P}, units);

        tpipe::cuda::engine eng({.gpu_of_device = std::vector<int>(static_cast<std::size_t>(P), 0)});
        owned_stream control;
        gpt::cuda::parameters dev(host, {&eng.memory(), 0}, control.s);
        gpt::cuda::basic_pipelined_model<gpt::cuda::device_backend, S> model(dev, P, control.s);
        graph_peer<S> peer(host, P, units, b);
        model.step(b, prog, eng);  // warm-up (pool blocks, cuBLAS heuristics)

        double pipelined = 0, graph = 0;
        for (auto _ : state) {
            auto t0 = clock_type::now();
            benchmark::DoNotOptimize(model.step(b, prog, eng));
            pipelined += seconds_since(t0);
            t0 = clock_type::now();
            peer.run();
            graph += seconds_since(t0);
        }
        const double tokens = double(bench_rows) * cfg.seq_len * static_cast<double>(state.iterations());
        state.counters["pipelined_tok_s"] = tokens / pipelined;
        state.counters["graph_tok_s"] = tokens / graph;
        state.counters["pipelined_over_graph"] = graph / pipelined;
        state.SetLabel(std::to_string(units.units()) + " units, " + std::to_string(P) + " stages on one GPU");
    } catch (const std::exception& e) {
        state.SkipWithError(e.what());
    }
}

void BM_gpt_cuda_fp32(benchmark::State& state, const std::string& schedule, const std::string& slicer)
{
    BM_gpt_cuda<float>(state, schedule, slicer);
}
void BM_gpt_cuda_bf16(benchmark::State& state, const std::string& schedule, const std::string& slicer)
{
    BM_gpt_cuda<gpt::cuda::bf16>(state, schedule, slicer);
}

} // namespace

BENCHMARK_CAPTURE(BM_gpt_cuda_fp32, 1f1b_microbatch, std::string("1f1b"), std::string("microbatch"))
    ->Arg(1)->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_gpt_cuda_fp32, terapipe_1f1b_grid, std::string("terapipe-1f1b"), std::string("grid"))
    ->Arg(2)->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_gpt_cuda_bf16, terapipe_1f1b_grid, std::string("terapipe-1f1b"), std::string("grid"))
    ->Arg(4)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
