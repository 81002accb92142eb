#pragma once
// Synthetic stages that enqueue "kernels" on the stream of the CUDA engine running them (the
// fake driver's launch()), around the exact integer arithmetic of tests/exec/synthetic.hpp, and
// check the engine's contract: current_stream()/current_device() set, the stage's GPU current.
// A device fault makes one of its kernels fail on the device (or fail to launch).
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "../exec/pipes.hpp"
#include "fake_driver.hpp"
#include "tpipe/cuda/basic_current.hpp"
#include "tpipe/exec/run.hpp"

namespace synth {

struct device_fault {
    int microbatch = -1, slice = -1;
    char kind = 0;  // 'F', 'B' or 'W'
    int code = 0;   // > 0: the kernel fails on the device; -1: its launch fails
};

template <bool Split>
struct gpu_stage : stage<Split> {
    using base = stage<Split>;
    fake::driver* d = nullptr;
    device_fault fault{};

    gpu_stage(long long a, long long b, fake::driver* drv, device_fault f = {}) : base(a, b), d(drv), fault(f) {}
    gpu_stage(gpu_stage&&) noexcept = default;

    void kernel(const tpipe::unit& u, char kind)
    {
        const auto& ctx = tpipe::cuda::basic_current_context<fake::driver>();
        int gpu = -1;
        d->get_device(&gpu);
        if (gpu != ctx.gpu) throw std::logic_error("the stage's GPU is not current while it runs");
        const bool hit = u.microbatch == fault.microbatch && u.slice == fault.slice && kind == fault.kind;
        if (hit && fault.code == -1) d->fail_launches(1);
        d->launch(ctx.stream, hit && fault.code > 0 ? fault.code : 0);
    }

    vec forward(const tpipe::unit& u, vec x)
    {
        kernel(u, 'F');
        return base::forward(u, std::move(x));
    }
    vec backward(const tpipe::unit& u, vec g)
    {
        kernel(u, 'B');
        return base::backward(u, std::move(g));
    }
    vec backward_input(const tpipe::unit& u, vec g)
        requires Split
    {
        kernel(u, 'B');
        return base::backward_input(u, std::move(g));
    }
    void backward_weight(const tpipe::unit& u)
        requires Split
    {
        kernel(u, 'W');
        base::backward_weight(u);
    }
};

//! The stages of make_uniform<Split>(n), launching on `d`, with `f` at stage `fault_stage`.
template <bool Split>
tpipe::uniform_pipeline<gpu_stage<Split>> make_gpu_uniform(int n, fake::driver& d, int fault_stage = -1,
                                                           device_fault f = {})
{
    std::vector<gpu_stage<Split>> stages;
    for (int i = 0; i < n; ++i) stages.emplace_back(i % 2 + 1, i + 1, &d, i == fault_stage ? f : device_fault{});
    return tpipe::uniform_pipeline<gpu_stage<Split>>(std::move(stages));
}

template <bool Split>
struct stage_of<tpipe::uniform_pipeline<gpu_stage<Split>>> {
    using type = gpu_stage<Split>;
};

//! Outputs, input gradients and stage states of one run of `pipe`.
template <class Pipe, class Engine>
results run_collect(Pipe& pipe, const tpipe::program& prog, Engine& eng, tpipe::run_options opts = {})
{
    results got;
    got.outputs.resize(static_cast<std::size_t>(prog.units.units()));
    got.input_grads.resize(static_cast<std::size_t>(prog.units.units()));
    tpipe::io_for<Pipe> io;
    io.source = source;
    io.output_grad = [&](const tpipe::unit& u, vec&& y) {
        got.outputs[static_cast<std::size_t>(prog.units.index(u.microbatch, u.slice))] = y;
        return loss_grad(y);
    };
    io.input_grad = [&](const tpipe::unit& u, vec&& dx) {
        got.input_grads[static_cast<std::size_t>(prog.units.index(u.microbatch, u.slice))] = std::move(dx);
    };
    tpipe::run(pipe, prog, eng, io, std::move(opts));
    got.states = states_of(pipe);
    return got;
}

} // namespace synth
