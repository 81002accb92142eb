#pragma once
// Helpers for runtime tests: synthetic pipelines of N stages, the sequential reference, and
// dispatch from a run-time stage count to a compile-time pipeline.
#include <cstddef>
#include <map>
#include <utility>
#include <vector>

#include "synthetic.hpp"
#include "tpipe/exec/pipeline.hpp"
#include "tpipe/slice/scheme.hpp"

namespace synth {

template <bool Split, std::size_t... I>
auto make_pipe(std::index_sequence<I...>, int fault_stage = -1, fault f = {})
{
    return tpipe::pipeline(stage<Split>(static_cast<long long>(I % 2 + 1), static_cast<long long>(I + 1),
                                        static_cast<int>(I) == fault_stage ? f : fault{})...);
}

template <bool Split, std::size_t N>
using pipe_t = decltype(make_pipe<Split>(std::make_index_sequence<N>{}));

struct results {
    std::vector<vec> outputs;      // per unit: last stage's output
    std::vector<vec> input_grads;  // per unit: first stage's input gradient
    std::vector<stage_state> states;
};

template <class Pipe, std::size_t... I>
std::vector<stage_state> states_of(Pipe& p, std::index_sequence<I...>)
{
    return {p.template stage<I>().st...};
}

//! Runs every unit through the stages one after another, without a pipeline.
template <class Pipe>
results sequential(Pipe& p, const tpipe::scheme& units)
{
    constexpr std::size_t N = Pipe::size;
    results r;
    r.outputs.resize(units.units());
    r.input_grads.resize(units.units());
    for (int m = 0; m < units.microbatches(); ++m) {
        std::vector<vec> seeds(units.slices(m));
        for (int s = 0; s < units.slices(m); ++s) {
            const tpipe::unit u = units.at(m, s);
            vec x = source(u);
            [&]<std::size_t... I>(std::index_sequence<I...>) {
                ((x = p.template stage<I>().forward(u, std::move(x))), ...);
            }(std::make_index_sequence<N>{});
            r.outputs[units.index(m, s)] = x;
            seeds[s] = loss_grad(x);
        }
        for (int s = units.slices(m) - 1; s >= 0; --s) {
            const tpipe::unit u = units.at(m, s);
            vec g = seeds[s];
            [&]<std::size_t... I>(std::index_sequence<I...>) {
                ((g = p.template stage<N - 1 - I>().backward(u, std::move(g))), ...);
            }(std::make_index_sequence<N>{});
            r.input_grads[units.index(m, s)] = g;
        }
    }
    r.states = states_of(p, std::make_index_sequence<N>{});
    return r;
}

//! Calls f(std::integral_constant<std::size_t, N>) for a run-time n in [1, 8].
template <class F>
void with_stage_count(int n, F&& f)
{
    [&]<std::size_t... I>(std::index_sequence<I...>) {
        bool done = false;
        ((n == static_cast<int>(I + 1) ? (f(std::integral_constant<std::size_t, I + 1>{}), done = true) : false), ...);
        if (!done) throw std::out_of_range("stage count outside [1, 8]");
    }(std::make_index_sequence<8>{});
}

} // namespace synth
