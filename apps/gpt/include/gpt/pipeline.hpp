#pragma once
// The reference GPT as tpipe stages: a model cut into contiguous parts, each part a stage
// functor (forward, backward, and the split backward_input/backward_weight for zero-bubble
// schedules), run by tpipe::run on CPU threads.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <tpipe/comm/reduction_order.hpp>
#include <tpipe/exec/gradients.hpp>
#include <tpipe/transport/payload_traits.hpp>
#include <tpipe/exec/run.hpp>

#include "gpt/model.hpp"

//! How a GPT activation crosses processes: its shape as the header, its values as the body.
template <class T>
struct tpipe::payload_traits<gpt::activation<T>> {
    struct header {
        std::int64_t rows, tokens, count;
    };
    static header header_of(const gpt::activation<T>& a)
    {
        return {a.rows, a.tokens, static_cast<std::int64_t>(a.data.size())};
    }
    static gpt::activation<T> make(const header& h)
    {
        return {h.rows, h.tokens, std::vector<T>(static_cast<std::size_t>(h.count))};
    }
    static std::span<const std::byte> bytes(const gpt::activation<T>& a) { return std::as_bytes(std::span<const T>(a.data)); }
    static std::span<std::byte> bytes(gpt::activation<T>& a) { return std::as_writable_bytes(std::span<T>(a.data)); }
};

namespace gpt {

//! Megatron's scatter/gather between tensor-parallel stages (train_gpt --scatter-gather). At a
//! stage boundary the activation and its gradient are the same on every tensor rank (each
//! follows a group sum), so tensor rank k sends only ring segment k of them
//! (tpipe::ring_segment) to rank k of the next (or previous) stage, and the receiver all-gathers
//! the segments over its tensor group: 1/t of the bytes cross the pipeline, and (t - 1)/t of
//! them cross the tensor group instead, where links are fast (NVLink within a node). Exact: the
//! gathered values are the sent bits.
template <class T>
struct boundary_split {
    std::function<void(std::span<T>)> all_gather;  //!< over the stage's tensor group
    int rank = 0, ranks = 1;                       //!< this tensor rank, of ranks
    bool gathers_input = false;    //!< not stage 0: its input (and its input's gradient) are split
    bool scatters_output = false;  //!< not the last stage: its output (and its gradient) are split
    std::int64_t width = 0;        //!< values per token (d_model)

    //! Ring segment `rank` of a whole activation.
    activation<T> scatter(activation<T> a) const
    {
        const auto seg = tpipe::ring_segment(a.data.size(), ranks, rank);
        a.data.erase(a.data.begin() + static_cast<std::ptrdiff_t>(seg.begin + seg.size), a.data.end());
        a.data.erase(a.data.begin(), a.data.begin() + static_cast<std::ptrdiff_t>(seg.begin));
        return a;
    }
    //! The whole activation from this rank's segment and the group's.
    activation<T> gather(activation<T> a) const
    {
        const auto n = static_cast<std::size_t>(a.rows * a.tokens * width);
        const auto seg = tpipe::ring_segment(n, ranks, rank);
        if (a.data.size() != seg.size)
            throw std::invalid_argument("scatter/gather: tensor rank " + std::to_string(rank) + " received " +
                                        std::to_string(a.data.size()) + " values, its segment of " +
                                        std::to_string(a.rows) + " x " + std::to_string(a.tokens) + " x " +
                                        std::to_string(width) + " is " + std::to_string(seg.size));
        std::vector<T> whole(n);
        std::copy(a.data.begin(), a.data.end(), whole.begin() + static_cast<std::ptrdiff_t>(seg.begin));
        all_gather(std::span<T>(whole));
        a.data = std::move(whole);
        return a;
    }
};

//! One pipeline stage: a view of a `part` (the part keeps the caches and saved activations).
template <class T>
struct stage {
    using input = activation<T>;
    using output = activation<T>;
    part<T>* p = nullptr;
    std::optional<boundary_split<T>> split{};  //!< --scatter-gather
    std::uint64_t bytes_sent = 0;            //!< what this stage handed the pipeline: outputs and input gradients

    output forward(const tpipe::unit& u, input x)
    {
        if (split && split->gathers_input) x = split->gather(std::move(x));
        output y = p->forward(u, std::move(x));
        if (split && split->scatters_output) y = split->scatter(std::move(y));
        bytes_sent += y.data.size() * sizeof(T);
        return y;
    }
    input backward(const tpipe::unit& u, output g) { return sent(in_split(p->backward(u, out_split(std::move(g))))); }
    input backward_input(const tpipe::unit& u, output g)
    {
        return sent(in_split(p->backward_input(u, out_split(std::move(g)))));
    }
    void backward_weight(const tpipe::unit& u) { p->backward_weight(u); }
    //! The part's parameter gradients (for tpipe::data_parallel).
    std::vector<std::span<T>> gradients() { return p->gradients(); }

private:
    output out_split(output g) const { return split && split->scatters_output ? split->gather(std::move(g)) : g; }
    input in_split(input g) const { return split && split->gathers_input ? split->scatter(std::move(g)) : g; }
    input sent(input g)
    {
        bytes_sent += g.data.size() * sizeof(T);
        return g;
    }
};
static_assert(tpipe::split_backward_stage<stage<float>> && tpipe::exposes_gradients<stage<float>> &&
              tpipe::byte_payload<activation<float>>);

//! Layers per stage as cut points 0 = c0 <= c1 <= ... <= cN = layers (remainder to early stages).
inline std::vector<int> even_layer_cuts(int layers, int stages)
{
    if (stages < 1) throw std::invalid_argument("need at least one stage, got " + std::to_string(stages));
    std::vector<int> cuts{0};
    for (int i = 0; i < stages; ++i) cuts.push_back(cuts.back() + layers / stages + (i < layers % stages ? 1 : 0));
    return cuts;
}

//! The model cut into `stages` parts, runnable by tpipe::run with any program for that many
//! stages. `threads_per_part` sizes each part's GEMM thread pool. With `here` (one flag per
//! stage), only the parts of the stages this process runs are built (SPMD over processes: the
//! others are never called); empty: every part.
//!
//! A frozen prefix: layer cuts that start at F > 0 leave the embeddings and layers [0, F) out
//! of the pipeline (they train no more; see gpt/frozen.hpp). Stage 0 then starts at layer F
//! and takes its input, the frozen prefix's output for the unit, from the function given to
//! set_source().
template <class T>
class pipelined_model {
public:
    pipelined_model(parameters<T>& params, int stages, int threads_per_part = 1, std::vector<int> layer_cuts = {},
                    std::vector<bool> here = {})
        : params_(&params)
    {
        if (stages < 1)
            throw std::invalid_argument("the GPT pipeline needs at least 1 stage, got " + std::to_string(stages));
        if (here.empty()) here.assign(static_cast<std::size_t>(stages), true);
        if (static_cast<int>(here.size()) != stages)
            throw std::invalid_argument("`here` needs one flag per stage");
        std::vector<parameters<T>*> each;
        for (int i = 0; i < stages; ++i) each.push_back(here[static_cast<std::size_t>(i)] ? &params : nullptr);
        build(params.cfg, std::move(each), threads_per_part, std::move(layer_cuts));
    }

    //! Stage-local state: stage i's part uses `stage_params[i]` (which holds at least its layers,
    //! see gpt/stage_state.hpp); a null entry is a stage of another process.
    pipelined_model(const config& cfg, std::vector<parameters<T>*> stage_params, int threads_per_part = 1,
                    std::vector<int> layer_cuts = {})
        : params_(nullptr)
    {
        if (stage_params.empty()) throw std::invalid_argument("the GPT pipeline needs at least 1 stage, got 0");
        build(cfg, std::move(stage_params), threads_per_part, std::move(layer_cuts));
    }

    int stages() const { return static_cast<int>(parts_.size()); }
    //! Layers [0, frozen()) are outside the pipeline.
    int frozen() const { return frozen_; }
    //! Where stage 0 gets a unit's input when layers are frozen (see the class comment).
    void set_source(std::function<activation<T>(const tpipe::unit&)> source)
    {
        if (frozen_ == 0) throw std::invalid_argument("set_source: no layer is frozen, stage 0 embeds the tokens itself");
        io_.source = std::move(source);
    }
    //! Activation recomputation on every part here (see part::set_recompute).
    void set_recompute(bool on)
    {
        for (auto& p : parts_)
            if (p) p->set_recompute(on);
    }
    //! Whether stage i's part was built here.
    bool has_part(int i) const { return parts_[static_cast<std::size_t>(i)] != nullptr; }
    part<T>& part_at(int i)
    {
        if (!has_part(i)) throw std::invalid_argument("stage " + std::to_string(i) + " runs in another process");
        return *parts_[static_cast<std::size_t>(i)];
    }
    //! The whole model's parameters (refused for stage-local state: use params_of).
    parameters<T>& params()
    {
        if (!params_) throw std::logic_error("gpt::pipelined_model: stage-local state has no whole-model parameters");
        return *params_;
    }
    const config& cfg() const { return cfg_; }

    //! The pipeline and its io, for a tpipe::runner kept across steps.
    tpipe::uniform_pipeline<stage<T>>& pipe() { return *pipe_; }
    const tpipe::io_for<tpipe::uniform_pipeline<stage<T>>>& io() const { return io_; }

    //! Before running a step on `b`: zeroes the gradients, starts every local part.
    void begin_step(const batch& b)
    {
        for (std::size_t i = 0; i < stage_params_.size(); ++i)
            if (stage_params_[i] && (i == 0 || stage_params_[i] != stage_params_[i - 1])) stage_params_[i]->zero_grad();
        for (auto& p : parts_)
            if (p) p->begin(&b);
    }
    //! After the run: flushes the tied-head gradient. Returns the mean loss over the batch (0 on a
    //! process that does not run the last stage).
    double finish_step()
    {
        for (auto& p : parts_)
            if (p) p->flush_grad();
        return parts_.back() ? parts_.back()->loss() : 0.0;
    }

    //! One training iteration's forward and backward under `prog` on `eng` (every stage here):
    //! begin_step, run, finish_step.
    template <tpipe::engine E>
    double step(const batch& b, const tpipe::program& prog, E& eng, tpipe::run_stats* stats = nullptr,
                tpipe::run_options opts = {})
    {
        begin_step(b);
        tpipe::run_stats s = tpipe::run(pipe(), prog, eng, io_, std::move(opts));
        if (stats) *stats = std::move(s);
        return finish_step();
    }

private:
    void build(const config& cfg, std::vector<parameters<T>*> each, int threads_per_part, std::vector<int> layer_cuts)
    {
        cfg_ = cfg;
        const int stages = static_cast<int>(each.size());
        if (layer_cuts.empty()) layer_cuts = even_layer_cuts(cfg.layers, stages);
        if (static_cast<int>(layer_cuts.size()) != stages + 1 || layer_cuts.front() < 0 ||
            layer_cuts.back() != cfg.layers)
            throw std::invalid_argument("layer cuts must be stages+1 points from the frozen layer count (0: none) "
                                        "to the layer count");
        frozen_ = layer_cuts.front();
        if (frozen_ > 0) layout(cfg).frozen_end(frozen_);  // refuses a frozen prefix the model cannot have
        std::vector<stage<T>> views;
        for (int i = 0; i < stages; ++i) {
            auto* p = each[static_cast<std::size_t>(i)];
            parts_.push_back(p ? std::make_unique<part<T>>(*p, layer_cuts[i], layer_cuts[i + 1], i == 0 && frozen_ == 0,
                                                           i + 1 == stages, threads_per_part)
                               : nullptr);
            views.push_back(stage<T>{.p = parts_.back().get()});
        }
        if (frozen_ > 0 && cfg.tied && parts_.back()) parts_.back()->freeze_head();  // it is the frozen embedding
        stage_params_ = std::move(each);
        pipe_.emplace(std::move(views));
        io_.source = [](const tpipe::unit&) { return activation<T>{}; };
    }

    parameters<T>* params_;
    config cfg_;
    std::vector<parameters<T>*> stage_params_;
    int frozen_ = 0;
    std::vector<std::unique_ptr<part<T>>> parts_;
    std::optional<tpipe::uniform_pipeline<stage<T>>> pipe_;
    tpipe::io_for<tpipe::uniform_pipeline<stage<T>>> io_;
};

} // namespace gpt
