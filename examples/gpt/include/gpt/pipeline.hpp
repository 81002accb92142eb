#pragma once
// The reference GPT as tpipe stages: a model cut into contiguous parts, each part a stage
// functor (forward, backward, and the split backward_input/backward_weight for zero-bubble
// schedules), run by tpipe::run on CPU threads.
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tpipe/exec/run.hpp>

#include "gpt/model.hpp"

namespace gpt {

//! One pipeline stage: a view of a `part` (the part keeps the caches and saved activations).
template <class T>
struct stage {
    using input = activation<T>;
    using output = activation<T>;
    part<T>* p = nullptr;

    output forward(const tpipe::unit& u, input x) { return p->forward(u, std::move(x)); }
    input backward(const tpipe::unit& u, output g) { return p->backward(u, std::move(g)); }
    input backward_input(const tpipe::unit& u, output g) { return p->backward_input(u, std::move(g)); }
    void backward_weight(const tpipe::unit& u) { p->backward_weight(u); }
};
static_assert(tpipe::split_backward_stage<stage<float>>);

//! Layers per stage as cut points 0 = c0 <= c1 <= ... <= cN = layers (remainder to early stages).
inline std::vector<int> even_layer_cuts(int layers, int stages)
{
    if (stages < 1) throw std::invalid_argument("need at least one stage, got " + std::to_string(stages));
    std::vector<int> cuts{0};
    for (int i = 0; i < stages; ++i) cuts.push_back(cuts.back() + layers / stages + (i < layers % stages ? 1 : 0));
    return cuts;
}

//! The model cut into `stages` parts, runnable by tpipe::run with any program for that many
//! stages. `threads_per_part` sizes each part's GEMM thread pool.
template <class T>
class pipelined_model {
public:
    pipelined_model(parameters<T>& params, int stages, int threads_per_part = 1, std::vector<int> layer_cuts = {})
        : params_(&params)
    {
        if (stages < 1)
            throw std::invalid_argument("the GPT pipeline needs at least 1 stage, got " + std::to_string(stages));
        if (layer_cuts.empty()) layer_cuts = even_layer_cuts(params.cfg.layers, stages);
        if (static_cast<int>(layer_cuts.size()) != stages + 1 || layer_cuts.front() != 0 ||
            layer_cuts.back() != params.cfg.layers)
            throw std::invalid_argument("layer cuts must be stages+1 points from 0 to the layer count");
        for (int i = 0; i < stages; ++i)
            parts_.push_back(std::make_unique<part<T>>(params, layer_cuts[i], layer_cuts[i + 1], i == 0,
                                                       i + 1 == stages, threads_per_part));
        for (auto& p : parts_) stages_.push_back(stage<T>{p.get()});
    }

    int stages() const { return static_cast<int>(parts_.size()); }
    part<T>& part_at(int i) { return *parts_[static_cast<std::size_t>(i)]; }
    parameters<T>& params() { return *params_; }

    //! One training iteration's forward and backward under `prog` on `eng`: zeroes the
    //! gradients, runs, flushes the tied-head gradient. Returns the mean loss over the batch.
    template <tpipe::engine E>
    double step(const batch& b, const tpipe::program& prog, E& eng, tpipe::run_stats* stats = nullptr,
                tpipe::run_options opts = {})
    {
        params_->zero_grad();
        for (auto& p : parts_) p->begin(&b);
        tpipe::run_stats s = run_stages(prog, eng, std::move(opts));
        for (auto& p : parts_) p->flush_grad();
        if (stats) *stats = std::move(s);
        return parts_.back()->loss();
    }

private:
    template <tpipe::engine E>
    tpipe::run_stats run_stages(const tpipe::program& prog, E& eng, tpipe::run_options opts)
    {
        tpipe::uniform_pipeline<stage<T>> pipe(stages_);
        tpipe::io_for<decltype(pipe)> io;
        io.source = [](const tpipe::unit&) { return activation<T>{}; };
        return tpipe::run(pipe, prog, eng, io, std::move(opts));
    }

    parameters<T>* params_;
    std::vector<std::unique_ptr<part<T>>> parts_;
    std::vector<stage<T>> stages_;
};

} // namespace gpt
