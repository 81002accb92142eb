#pragma once
// The checks of the CUDA GPT's model, written once over a rig: the host backend runs them in the
// CPU tests (test_model.cpp, test_pipeline.cpp), the device backend in the GPU tests
// (gpu_model.cpp), each with its tolerance. A rig gives `using backend`, place() and stream(i)
// (the i-th of a few streams; the host has one).
#include <functional>
#include <vector>

#include <tpipe/slice/slicers.hpp>

#include "common.hpp"
#include "gpt_cuda/basic_pipeline.hpp"
#include "gpt_cuda/host_backend.hpp"

namespace gpt_cuda_test {

//! The host backend's rig: no streams.
struct host_rig {
    using backend = gpt::cuda::host_backend;
    backend::place place() { return {}; }
    backend::stream_type stream(int) { return 0; }
};

//! The whole batch as one unit: the loss and every gradient equal the CPU GPT's (tied and untied).
template <class S = float, class Rig>
void check_one_unit(Rig& rig, double tol)
{
    using B = typename Rig::backend;
    for (bool tied : {true, false}) {
        INFO((tied ? "tied head" : "untied head"));
        const auto cfg = test_config(tied);
        gpt::parameters<float> cpu(cfg);
        cpu.init(7);
        const auto b = gpt_test::random_batch(cfg, 3, cfg.seq_len, 11);
        const double loss_cpu = gpt::full_step(cpu, b);
        gpt::cuda::basic_parameters<B> dev(cpu, rig.place(), rig.stream(0));
        const double loss = gpt::cuda::full_step<S>(dev, b, rig.stream(0));
        gpt::parameters<float> got(cfg);
        dev.download(got, rig.stream(0));
        CHECK(std::abs(loss - loss_cpu) <= tol * std::abs(loss_cpu));
        CHECK(got.value == cpu.value);  // a step leaves the weights alone
        check_gradients(got, cpu, tol);
    }
}

//! Token-sliced and rows x tokens units through two parts (on two streams where there are
//! streams) equal the unsliced CPU step.
template <class S = float, class Rig>
void check_sliced(Rig& rig, double tol)
{
    using B = typename Rig::backend;
    for (bool tied : {true, false}) {
        const auto cfg = test_config(tied);
        gpt::parameters<float> cpu(cfg);
        cpu.init(5);
        const auto b = gpt_test::random_batch(cfg, 4, cfg.seq_len, 21);
        const double loss_cpu = gpt::full_step(cpu, b);
        const tpipe::batch_shape shape{4, cfg.seq_len};
        for (const auto& units :
             {tpipe::token_slicer{{7, 9, 8}}.scheme(shape), tpipe::grid_slicer{2, {5, 3, 16}}.scheme(shape)}) {
            INFO((tied ? "tied, " : "untied, ") << units.units() << " units");
            gpt::cuda::basic_parameters<B> dev(cpu, rig.place(), rig.stream(0));
            gpt::cuda::basic_part<B, S> p0(dev, 0, 1, true, false, rig.stream(0)),
                p1(dev, 1, 2, false, true, rig.stream(1));
            const double loss = gpt::cuda::run_in_order<B, S>({&p0, &p1}, units, b);
            gpt::parameters<float> got(cfg);
            dev.download(got, rig.stream(0));
            CHECK(std::abs(loss - loss_cpu) <= tol * std::abs(loss_cpu));
            check_gradients(got, cpu, tol);
        }
    }
}

//! Three AdamW steps: the losses, the gradient norms the optimizer saw and the final weights
//! track the CPU model's.
template <class S = float, class Rig>
void check_adamw(Rig& rig, double tol)
{
    using B = typename Rig::backend;
    const auto cfg = test_config(true);
    const auto ref = cpu_training(cfg);
    gpt::parameters<float> host(cfg);
    host.init(3);
    gpt::cuda::basic_parameters<B> dev(host, rig.place(), rig.stream(0));
    gpt::cuda::basic_adamw<B> opt(dev, {.lr = 1e-3}, rig.stream(0));
    for (int i = 0; i < train_steps; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const double loss = gpt::cuda::full_step<S>(dev, train_batch(cfg, i), rig.stream(0));
        CHECK(std::abs(loss - ref.losses[at]) <= tol * ref.losses[at]);
        opt.step(rig.stream(0));
        CHECK(std::abs(opt.last_grad_norm() - ref.grad_norms[at]) <= tol * ref.grad_norms[at]);
    }
    dev.download(host, rig.stream(0));
    CHECK(gpt_test::rel_err(host.value, ref.weights) <= tol);
    CHECK(opt.steps() == train_steps);
}

//! The pipelined model trained `train_steps` AdamW steps under `prog` on `eng` gives the losses
//! and weights of the CPU GPT trained without a pipeline (ref, cpu_training(cfg)).
//! after_step(i) runs after each step (the GPU test counts the pool's driver allocations there).
template <class S = float, class Rig, class Engine>
void check_pipelined(Rig& rig, Engine& eng, const gpt::config& cfg, int stages, const tpipe::program& prog,
                     const reference& ref, double tol, const std::function<void(int)>& after_step = {})
{
    using B = typename Rig::backend;
    gpt::parameters<float> host(cfg);
    host.init(3);
    gpt::cuda::basic_parameters<B> dev(host, rig.place(), rig.stream(0));
    gpt::cuda::basic_pipelined_model<B, S> model(dev, stages, rig.stream(0));
    gpt::cuda::basic_adamw<B> opt(dev, {.lr = 1e-3}, rig.stream(0));
    for (int i = 0; i < train_steps; ++i) {
        const auto at = static_cast<std::size_t>(i);
        const double loss = model.step(train_batch(cfg, i), prog, eng);
        CHECK(std::abs(loss - ref.losses[at]) <= tol * ref.losses[at]);
        opt.step(rig.stream(0));
        if (after_step) after_step(i);
    }
    dev.download(host, rig.stream(0));
    CHECK(gpt_test::rel_err(host.value, ref.weights) <= tol);
}

} // namespace gpt_cuda_test
