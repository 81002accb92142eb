#pragma once
// Helpers for runtime tests: synthetic pipelines of N stages (typed at compile time, or shaped
// at run time), and the sequential reference.
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

//! The same stages as make_pipe, as a pipeline shaped at run time.
template <bool Split>
tpipe::uniform_pipeline<stage<Split>> make_uniform(int n, int fault_stage = -1, fault f = {})
{
    std::vector<stage<Split>> stages;
    for (int i = 0; i < n; ++i) stages.emplace_back(i % 2 + 1, i + 1, i == fault_stage ? f : fault{});
    return tpipe::uniform_pipeline<stage<Split>>(std::move(stages));
}

template <class Pipe>
struct stage_of {
    using type = typename Pipe::template stage_type<0>;
};
template <class S>
struct stage_of<tpipe::uniform_pipeline<S>> {
    using type = typename tpipe::uniform_pipeline<S>::stage_type;
};

//! The stage objects of a synthetic pipeline (typed or uniform), in order.
template <class Pipe>
std::vector<typename stage_of<Pipe>::type*> stage_list(Pipe& p)
{
    std::vector<typename stage_of<Pipe>::type*> v;
    p.visit_stages([&](std::size_t, auto& s) { v.push_back(&s); });
    return v;
}

struct results {
    std::vector<vec> outputs;      // per unit: last stage's output
    std::vector<vec> input_grads;  // per unit: first stage's input gradient
    std::vector<stage_state> states;
};

template <class Pipe>
std::vector<stage_state> states_of(Pipe& p)
{
    std::vector<stage_state> v;
    for (auto* s : stage_list(p)) v.push_back(s->st);
    return v;
}

//! Runs every unit through the stages one after another, without a pipeline.
template <class Pipe>
results sequential(Pipe& p, const tpipe::scheme& units)
{
    const auto stages = stage_list(p);
    results r;
    r.outputs.resize(units.units());
    r.input_grads.resize(units.units());
    for (int m = 0; m < units.microbatches(); ++m) {
        std::vector<vec> seeds(units.slices(m));
        for (int s = 0; s < units.slices(m); ++s) {
            const tpipe::unit u = units.at(m, s);
            vec x = source(u);
            for (auto* st : stages) x = st->forward(u, std::move(x));
            r.outputs[units.index(m, s)] = x;
            seeds[s] = loss_grad(x);
        }
        for (int s = units.slices(m) - 1; s >= 0; --s) {
            const tpipe::unit u = units.at(m, s);
            vec g = seeds[s];
            for (auto it = stages.rbegin(); it != stages.rend(); ++it) g = (*it)->backward(u, std::move(g));
            r.input_grads[units.index(m, s)] = g;
        }
    }
    r.states = states_of(p);
    return r;
}

} // namespace synth
