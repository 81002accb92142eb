#pragma once
// The MPI suite's synthetic pipeline run: the same program through a runner in one process
// (threads) or over processes (a tpipe::mpi::transport of any link engine), and what each process
// saw, to compare bitwise (integer stages).
#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <type_traits>
#include <utility>
#include <vector>

#include "../exec/pipes.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/mpi/transport.hpp"

namespace tpipe_test {

inline int world_size()
{
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}
inline int world_rank()
{
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

struct outcome {
    std::vector<synth::vec> outputs, input_grads;
    std::vector<synth::stage_state> states;
};

//! Runs `prog` twice (two iterations through one runner) with transport x (or in-process when
//! x is null) and returns what this process saw.
template <class X>
outcome run_synthetic(const tpipe::program& prog, X* x, int devices)
{
    auto pipe = synth::make_uniform<true>(prog.stages());
    outcome got;
    got.outputs.resize(static_cast<std::size_t>(prog.units.units()));
    got.input_grads.resize(static_cast<std::size_t>(prog.units.units()));
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    io.output_grad = [&](const tpipe::unit& u, synth::vec&& y) {
        got.outputs[static_cast<std::size_t>(prog.units.index(u.microbatch, u.slice))] = y;
        return synth::loss_grad(y);
    };
    io.input_grad = [&](const tpipe::unit& u, synth::vec&& dx) {
        got.input_grads[static_cast<std::size_t>(prog.units.index(u.microbatch, u.slice))] = std::move(dx);
    };
    tpipe::cpu_engine eng(devices);
    tpipe::run_options opts;
    opts.watchdog = std::chrono::seconds(30);
    auto two_iterations = [&](auto& r) {
        for (int it = 0; it < 2; ++it) {
            for (auto* s : synth::stage_list(pipe)) s->new_iteration();
            r.run(io);
        }
    };
    if constexpr (std::is_same_v<X, tpipe::local_transport>) {
        tpipe::runner r(pipe, prog, eng, opts);
        two_iterations(r);
    } else {
        tpipe::runner r(pipe, prog, eng, *x, opts);
        two_iterations(r);
    }
    got.states = synth::states_of(pipe);
    return got;
}

//! Checks a process's share of `got` against the in-process `want`.
inline bool matches(const tpipe::program& prog, const tpipe::mpi::transport& x, const outcome& got, const outcome& want)
{
    bool ok = true;
    for (int s = 0; s < prog.stages(); ++s)
        if (x.runs(prog.stage_rank[s])) ok = ok && got.states[s] == want.states[s];
    if (x.runs(prog.stage_rank[prog.stages() - 1])) ok = ok && got.outputs == want.outputs;
    if (x.runs(prog.stage_rank[0])) ok = ok && got.input_grads == want.input_grads;
    return ok;
}

} // namespace tpipe_test
