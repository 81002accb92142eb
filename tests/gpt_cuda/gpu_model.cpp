// The CUDA GPT on a GPU against the CPU GPT (float32, within 1e-4 relative): the checks of
// model_checks.hpp (one unit, token-sliced and rows x tokens over two parts on two streams,
// AdamW) on the device backend — the same checks the CPU tests run on the host backend — and the
// pipeline on tpipe::cuda::engine, several stages on one GPU with one stream each, equal to the
// CPU GPT trained without a pipeline, with no driver allocation in the steady state. Needs a GPU
// (gpu_main skips without one).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <tpipe/cuda/engine.hpp>
#include <tpipe/cuda/error_macros.hpp>
#include <tpipe/schedule/by_name.hpp>

#include "gpt_cuda/pipeline.hpp"
#include "model_checks.hpp"

namespace {

using namespace gpt_cuda_test;
constexpr double tol = 1e-4;  // float32 on the GPU (other summation orders) against float32 on the CPU

//! GPU 0, a pool and two streams.
struct device_rig {
    using backend = gpt::cuda::device_backend;
    tpipe::cuda::memory_pool pool = tpipe::cuda::make_memory_pool();
    cudaStream_t streams[2]{};
    device_rig()
    {
        for (auto& s : streams) TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
    ~device_rig()
    {
        for (auto s : streams) cudaStreamDestroy(s);
    }
    backend::place place() { return {&pool, 0}; }
    cudaStream_t stream(int i) { return streams[i]; }
};

//! The model's memory from the engine's pool (whose driver allocations the pipeline test counts).
struct engine_rig : device_rig {
    tpipe::cuda::engine& eng;
    explicit engine_rig(tpipe::cuda::engine& e) : eng(e) {}
    backend::place place() { return {&eng.memory(), 0}; }
};

} // namespace

TEST_CASE("the CUDA GPT's loss and every gradient equal the CPU GPT's, whole batch as one unit", "[cuda][gpt_cuda]")
{
    device_rig rig;
    check_one_unit(rig, tol);
}

TEST_CASE("token-sliced and rows x tokens units through two CUDA parts on two streams equal the unsliced CPU step",
          "[cuda][gpt_cuda]")
{
    device_rig rig;
    check_sliced(rig, tol);
}

TEST_CASE("AdamW steps on the GPU track the CPU model's losses, gradient norms and weights", "[cuda][gpt_cuda]")
{
    device_rig rig;
    check_adamw(rig, tol);
}

TEST_CASE("pipelined on cuda::engine (stages on one GPU, one stream each) equals the CPU GPT without a pipeline",
          "[cuda][gpt_cuda][pipeline]")
{
    auto cfg = test_config(true);
    cfg.layers = 4;
    const auto ref = cpu_training(cfg);
    const tpipe::batch_shape shape{train_rows, cfg.seq_len};
    struct kase {
        std::string schedule;
        int ranks;
        tpipe::scheme units;
    };
    const std::vector<kase> cases{
        {"1f1b", 2, tpipe::microbatch_slicer{4}.scheme(shape)},
        {"terapipe-1f1b", 2, tpipe::token_slicer{{10, 8, 6}}.scheme(shape)},
        {"terapipe-gpipe", 4, tpipe::grid_slicer{2, {12, 12}}.scheme(shape)},
        {"zb-h1", 2, tpipe::microbatch_slicer{4}.scheme(shape)},
    };
    for (const auto& c : cases) {
        INFO(c.schedule << " on " << c.ranks << " ranks, " << c.units.units() << " units");
        const auto prog = tpipe::make_schedule(c.schedule).program(tpipe::topology{.ranks = c.ranks}, c.units);
        tpipe::cuda::engine eng({.gpu_of_device = std::vector<int>(static_cast<std::size_t>(c.ranks), 0)});
        engine_rig rig(eng);
        std::size_t steady = 0;
        check_pipelined(rig, eng, cfg, c.ranks, prog, ref, tol, [&](int i) {
            TPIPE_CUDA_TRY(cudaStreamSynchronize(rig.stream(0)));
            // The first two iterations may differ in which freed blocks had completed when they
            // were needed; from then on the pool reuses its blocks.
            if (i == 1) steady = eng.memory().stats().driver_allocations;
            if (i > 1) CHECK(eng.memory().stats().driver_allocations == steady);
        });
    }
}

// bf16 storage on the GPU: the tolerance of the host-backend bf16 tests (test_model.cpp: worst
// seen there 9.5e-3 relative), since cuBLAS rounds its bf16 outputs the same way and differs only
// in the order of its float sums.
TEST_CASE("bf16 storage on the GPU: loss, gradients and AdamW steps are the CPU GPT's within bf16's precision",
          "[cuda][gpt_cuda][bf16]")
{
    constexpr double bf16_tol = 3e-2;
    device_rig rig;
    check_one_unit<gpt::cuda::bf16>(rig, bf16_tol);
    check_sliced<gpt::cuda::bf16>(rig, bf16_tol);
    check_adamw<gpt::cuda::bf16>(rig, bf16_tol);
}

TEST_CASE("bf16 storage, pipelined on cuda::engine: TeraPipe-1F1B over token slices tracks the CPU GPT",
          "[cuda][gpt_cuda][bf16][pipeline]")
{
    auto cfg = test_config(true);
    cfg.layers = 4;
    const auto ref = cpu_training(cfg);
    const tpipe::batch_shape shape{train_rows, cfg.seq_len};
    const auto prog = tpipe::make_schedule("terapipe-1f1b")
                          .program(tpipe::topology{.ranks = 2}, tpipe::token_slicer{{10, 8, 6}}.scheme(shape));
    tpipe::cuda::engine eng({.gpu_of_device = {0, 0}});
    engine_rig rig(eng);
    check_pipelined<gpt::cuda::bf16>(rig, eng, cfg, 2, prog, ref, 3e-2);
}
