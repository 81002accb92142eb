#pragma once
// What a pipeline of tp_test::mlp_stage computes (tests/exec/tp_mlp.hpp): the last stage's outputs,
// the first stage's input gradients and every stage's whole weight gradients, by microbatch and stage.
#include <chrono>
#include <utility>
#include <vector>

#include "tp_mlp.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tp_test {

struct result {
    std::vector<vec> outputs, input_grads;  // by microbatch (filled where this process runs the ends)
    std::vector<vec> dw1, dw2;              // by stage: this tensor rank's shares
};

//! One 1F1B iteration of `stages` (K of them, this tensor rank's) over `microbatches`, through
//! transport `x` (nullptr: every rank in this process, a loop each).
template <class Comm, class Transport = tpipe::local_transport>
result run_pipeline(std::vector<mlp_stage<Comm>> stages, int microbatches, Transport* x = nullptr)
{
    const int K = static_cast<int>(stages.size());
    tpipe::uniform_pipeline<mlp_stage<Comm>> pipe(std::move(stages));
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{K}, tpipe::microbatches(microbatches));
    result r;
    r.outputs.resize(static_cast<std::size_t>(microbatches));
    r.input_grads.resize(static_cast<std::size_t>(microbatches));
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit& u) { return source(u.microbatch); };
    io.output_grad = [&](const tpipe::unit& u, vec&& y) {
        r.outputs[static_cast<std::size_t>(u.microbatch)] = y;
        return y;  // the gradient of |y|^2 / 2
    };
    io.input_grad = [&](const tpipe::unit& u, vec&& dx) { r.input_grads[static_cast<std::size_t>(u.microbatch)] = std::move(dx); };
    tpipe::run_options opts;
    opts.watchdog = std::chrono::seconds(30);
    if constexpr (std::is_same_v<Transport, tpipe::local_transport>) {
        // A loop per rank, even past the hardware threads: a stage blocks in its tensor group's
        // sum until the same stage of the other tensor ranks' pipelines arrives, so two ranks on
        // one loop (the default on 2 cores) could each wait for the other's turn: a deadlock.
        tpipe::cpu_engine engine(K, tpipe::cpu_engine::options{.threads = K});
        tpipe::runner runner(pipe, prog, engine, opts);
        runner.run(io);
    } else {
        tpipe::cpu_engine engine(1);
        tpipe::runner runner(pipe, prog, engine, *x, opts);
        runner.run(io);
    }
    pipe.visit_stages([&](std::size_t, auto& s) {
        r.dw1.push_back(s.dw1);
        r.dw2.push_back(s.dw2);
    });
    return r;
}

//! Tensor rank k's share of whole gradients: rows of dW1, columns of dW2.
inline vec rows_of(const vec& whole, int k, int t)
{
    const int share = hidden / t;
    return vec(whole.begin() + k * share * width, whole.begin() + (k + 1) * share * width);
}
inline vec columns_of(const vec& whole, int k, int t)
{
    const int share = hidden / t;
    vec out;
    for (int i = 0; i < width; ++i)
        for (int j = 0; j < share; ++j) out.push_back(whole[static_cast<std::size_t>(i * hidden + k * share + j)]);
    return out;
}

//! The same model at t = 1 in one process.
template <class Comm>
result whole_model(int K, int microbatches)
{
    std::vector<mlp_stage<Comm>> stages;
    for (int s = 0; s < K; ++s) stages.emplace_back(s, 0, 1, nullptr);
    return run_pipeline<Comm>(std::move(stages), microbatches);
}

} // namespace tp_test
