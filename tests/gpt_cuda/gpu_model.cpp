// The CUDA GPT on a GPU against the CPU GPT (float32): the loss and every parameter's gradient of
// one step, unsliced and token-sliced; pipelined on tpipe::cuda::engine (several stages on one
// GPU, one stream each) equals the sequential run; AdamW steps track the CPU model's losses; a
// steady-state iteration makes no driver allocation. Needs a GPU (gpu_main skips without one).
#include <catch2/catch.hpp>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include <tpipe/cuda/engine.hpp>
#include <tpipe/cuda/error.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "common.hpp"
#include "gpt_cuda/pipeline.hpp"

namespace {

using namespace gpt_cuda_test;
constexpr double tol = 1e-4;  // float32 on the GPU (other summation orders) against float32 on the CPU

struct stream_guard {
    cudaStream_t s{};
    stream_guard() { TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
    ~stream_guard() { cudaStreamDestroy(s); }
};

} // namespace

TEST_CASE("the CUDA GPT's loss and every gradient equal the CPU GPT's, whole batch as one unit", "[cuda][gpt_cuda]")
{
    for (bool tied : {true, false}) {
        INFO((tied ? "tied head" : "untied head"));
        const auto cfg = test_config(tied);
        gpt::parameters<float> cpu(cfg);
        cpu.init(7);
        const auto b = gpt_test::random_batch(cfg, 3, cfg.seq_len, 11);
        const double loss_cpu = gpt::full_step(cpu, b);

        stream_guard s;
        auto pool = tpipe::cuda::make_memory_pool();
        gpt::cuda::parameters dev(cpu, {&pool, 0}, s.s);
        const double loss = gpt::cuda::full_step(dev, b, s.s);
        gpt::parameters<float> got(cfg);
        dev.download(got, s.s);
        CHECK(std::abs(loss - loss_cpu) <= tol * std::abs(loss_cpu));
        CHECK(got.value == cpu.value);  // a step leaves the weights alone
        check_gradients(got, cpu, tol);
    }
}

TEST_CASE("token-sliced and rows x tokens units through two CUDA parts equal the unsliced CPU step", "[cuda][gpt_cuda]")
{
    const auto cfg = test_config(true);
    gpt::parameters<float> cpu(cfg);
    cpu.init(5);
    const auto b = gpt_test::random_batch(cfg, 4, cfg.seq_len, 21);
    const double loss_cpu = gpt::full_step(cpu, b);
    const tpipe::batch_shape shape{4, cfg.seq_len};
    for (const auto& units : {tpipe::token_slicer{{7, 9, 8}}.scheme(shape), tpipe::grid_slicer{2, {5, 3, 16}}.scheme(shape)}) {
        INFO(units.units() << " units");
        stream_guard s0, s1;  // one stream per part
        auto pool = tpipe::cuda::make_memory_pool();
        gpt::cuda::parameters dev(cpu, {&pool, 0}, s0.s);
        gpt::cuda::part p0(dev, 0, 1, true, false, s0.s), p1(dev, 1, 2, false, true, s1.s);
        const std::vector<gpt::cuda::part*> parts{&p0, &p1};
        const double loss = gpt::cuda::run_in_order(parts, units, b);
        gpt::parameters<float> got(cfg);
        dev.download(got, s0.s);
        CHECK(std::abs(loss - loss_cpu) <= tol * std::abs(loss_cpu));
        check_gradients(got, cpu, tol);
    }
}

TEST_CASE("units out of causal order are refused on the GPU as on the CPU", "[cuda][gpt_cuda]")
{
    const auto cfg = test_config(true);
    gpt::parameters<float> cpu(cfg);
    cpu.init(1);
    const auto b = gpt_test::random_batch(cfg, 2, cfg.seq_len, 3);
    stream_guard s;
    auto pool = tpipe::cuda::make_memory_pool();
    gpt::cuda::parameters dev(cpu, {&pool, 0}, s.s);
    gpt::cuda::part p(dev, 0, cfg.layers, true, true, s.s);
    p.begin(&b);
    CHECK_THROWS_AS(p.forward({0, 1, 0, 2, 8, 16}, {}), tpipe::invalid_argument);  // tokens [8,16) before [0,8)
    p.forward({0, 0, 0, 2, 0, 8}, {});
    p.forward({0, 1, 0, 2, 8, 16}, {});
    CHECK_THROWS_AS(p.backward({0, 0, 0, 2, 0, 8}, {}), tpipe::invalid_argument);  // [0,8) before [8,16)
    auto bad = gpt_test::random_batch(cfg, 2, cfg.seq_len, 3);
    bad.inputs[5] = cfg.vocab;
    CHECK_THROWS_AS(p.begin(&bad), tpipe::invalid_argument);
}

TEST_CASE("AdamW steps on the GPU track the CPU model's losses and weights", "[cuda][gpt_cuda]")
{
    const auto cfg = test_config(true);
    const auto ref = cpu_training(cfg);
    gpt::parameters<float> host(cfg);
    host.init(3);
    stream_guard s;
    auto pool = tpipe::cuda::make_memory_pool();
    gpt::cuda::parameters dev(host, {&pool, 0}, s.s);
    gpt::cuda::adamw opt(dev, {.lr = 1e-3}, s.s);
    for (int i = 0; i < train_steps; ++i) {
        const auto b = train_batch(cfg, i);
        const double loss = gpt::cuda::full_step(dev, b, s.s);
        CHECK(std::abs(loss - ref.losses[static_cast<std::size_t>(i)]) <= tol * ref.losses[static_cast<std::size_t>(i)]);
        opt.step(s.s);
    }
    dev.download(host, s.s);
    CHECK(gpt_test::rel_err(host.value, ref.weights) <= tol);
}

TEST_CASE("pipelined on cuda::engine (stages on one GPU, one stream each) equals the sequential run",
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
        gpt::parameters<float> host(cfg);
        host.init(3);
        tpipe::cuda::engine eng({.gpu_of_device = std::vector<int>(static_cast<std::size_t>(c.ranks), 0)});
        stream_guard control;
        gpt::cuda::parameters dev(host, {&eng.memory(), 0}, control.s);
        gpt::cuda::pipelined_model model(dev, c.ranks, control.s);
        gpt::cuda::adamw opt(dev, {.lr = 1e-3}, control.s);
        std::size_t allocations_steady = 0;
        for (int i = 0; i < train_steps; ++i) {
            const auto b = train_batch(cfg, i);
            const double loss = model.step(b, prog, eng);
            CHECK(std::abs(loss - ref.losses[static_cast<std::size_t>(i)]) <= tol * ref.losses[static_cast<std::size_t>(i)]);
            opt.step(control.s);
            TPIPE_CUDA_TRY(cudaStreamSynchronize(control.s));
            if (i == 1) allocations_steady = eng.memory().stats().driver_allocations;
        }
        // The steady state reuses the pool's blocks: no driver allocation after the second iteration
        // (the first two may differ in which freed blocks had completed when they were needed).
        CHECK(eng.memory().stats().driver_allocations == allocations_steady);
        dev.download(host, control.s);
        CHECK(gpt_test::rel_err(host.value, ref.weights) <= tol);
    }
}
