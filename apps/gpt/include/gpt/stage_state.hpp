#pragma once
// Stage-local state: the parameters, gradients and AdamW moments of the pipeline stages one
// process runs, and nothing of the others (on threads, each stage its own).
//
// What stays global, and how it is made so without a whole-model vector:
// - the gradient-norm clip: each stage sums the squares of its gradients exactly
//   (tpipe::exact_square_sum); the stages' sums are added as integers, so the norm has the same
//   bits on threads, over MPI, for every cut and for every sharding of the optimizer;
// - a tied LM head: the first stage holds the embedding, the last a copy of it as its head; after
//   the backward the two gradients are summed (embedding + head, the whole model's order) into
//   both copies by a tpipe::tied_gradient, as Megatron does, so the copies take the same steps
//   and stay equal.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tpipe/state/tied_gradient.hpp>

#include "gpt/model.hpp"

namespace gpt {

template <class T>
class stage_states {
public:
    //! The stages i with here[i] (empty: all), cut at `layer_cuts` (empty: even), initialised as
    //! the whole model with `seed` would be. With tensor ranks, each stage holds tensor rank
    //! `tensor.rank`'s share of its layers (see gpt::tensor_split).
    stage_states(const config& cfg, int stages, std::vector<int> layer_cuts, std::vector<bool> here,
                 adamw_options o, std::uint64_t seed, tensor_split tensor = {})
        : cfg_(cfg), tensor_(tensor)
    {
        if (stages < 1) throw std::invalid_argument("stage_states: need at least 1 stage, got " + std::to_string(stages));
        if (layer_cuts.empty()) {
            layer_cuts.push_back(0);
            for (int i = 0; i < stages; ++i)
                layer_cuts.push_back(layer_cuts.back() + cfg.layers / stages + (i < cfg.layers % stages ? 1 : 0));
        }
        if (static_cast<int>(layer_cuts.size()) != stages + 1 || layer_cuts.front() != 0 || layer_cuts.back() != cfg.layers)
            throw std::invalid_argument("stage_states: layer cuts must be stages+1 points from 0 to the layer count");
        if (here.empty()) here.assign(static_cast<std::size_t>(stages), true);
        if (static_cast<int>(here.size()) != stages) throw std::invalid_argument("stage_states: one `here` flag per stage");
        for (int i = 0; i < stages; ++i) {
            if (!here[static_cast<std::size_t>(i)]) {
                states_.push_back(nullptr);
                continue;
            }
            auto s = std::make_unique<state>(cfg, holding{layer_cuts[i], layer_cuts[i + 1], i == 0, i + 1 == stages, tensor}, o);
            s->params.init(seed);
            states_.push_back(std::move(s));
        }
        if (tied_across_stages()) {  // the embedding rows this tensor rank holds (all of them at one rank)
            // [snippet:tie]
            tie_.emplace(std::vector<int>{0, stages - 1}, static_cast<std::size_t>(cfg_.vocab / tensor_.ranks * cfg_.d_model));
            for (int i : {0, stages - 1})
                if (holds(i)) tie_->hold(i, std::span<T>(embedding_grad(i), tie_->size()));
            // [/snippet]
        }
    }

    int stages() const { return static_cast<int>(states_.size()); }
    bool holds(int i) const { return states_.at(static_cast<std::size_t>(i)) != nullptr; }
    parameters<T>& params(int i) { return at(i).params; }
    const parameters<T>& params(int i) const { return at(i).params; }
    adamw<T>& opt(int i) { return at(i).opt; }
    //! One pointer per stage, null for those of other processes (for pipelined_model).
    std::vector<parameters<T>*> pointers()
    {
        std::vector<parameters<T>*> out;
        for (auto& s : states_) out.push_back(s ? &s->params : nullptr);
        return out;
    }

    using square_sum = typename adamw<T>::square_sum;
    //! The squares of the local stages' gradients, added over the stages.
    square_sum squares() const
    {
        square_sum out;
        for (const auto& s : states_)
            if (s) out.add(s->opt.squares(s->params));
        return out;
    }

    //! Whether the head is tied and held by two stages (more than one stage).
    bool tied_across_stages() const { return cfg_.tied && stages() > 1; }
    //! The tied LM head's gradient: the first stage's embedding and the last stage's head,
    //! whichever are here (null unless tied_across_stages()). Summed before the step (over the
    //! pipeline's processes when they are elsewhere), it is the whole model's embedding gradient.
    tpipe::tied_gradient<T>* tie() { return tie_ ? &*tie_ : nullptr; }

    //! After a backward with every stage here (threads): syncs the tied copies and steps each
    //! stage with the global norm. Over processes, sum tie() and squares() over the pipeline's
    //! processes and call step(squares) instead.
    void step()
    {
        for (const auto& s : states_)
            if (!s) throw std::logic_error("stage_states::step(): a stage runs elsewhere; reduce over the processes");
        if (tie_) tie_->sum_here();
        step(squares());
    }
    void step(const square_sum& all_squares)
    {
        for (auto& s : states_)
            if (s) s->opt.step(s->params, all_squares);
    }

    //! Calls f(global_offset, values) for every tensor here (not the tied copies), in the whole
    //! model's order: a fingerprint or a whole-model vector can be built without one. With tensor
    //! ranks, `values` is this rank's share of the tensor at `global_offset`.
    template <class F>
    void each_tensor(bool gradients, F&& f) const
    {
        for (int i = 0; i < stages(); ++i) each_tensor(i, gradients, f);
    }
    //! The same for stage i only (nothing when it is not here).
    template <class F>
    void each_tensor(int i, bool gradients, F&& f) const
    {
        const auto& s = states_.at(static_cast<std::size_t>(i));
        if (!s) return;
        const auto& v = gradients ? s->params.grad : s->params.value;
        for (const auto& t : s->params.lay.tensors)
            if (!t.tied_copy) f(t.global_offset, std::span<const T>(v.data() + t.offset, static_cast<std::size_t>(t.size())));
    }
    //! The whole model's values (or gradients), zero where another process holds them (--check):
    //! a tensor rank's share in its place, a tensor every tensor rank holds from rank 0 only. Summed
    //! over the processes (each element is one process's), it is the whole model's vector.
    std::vector<T> whole(bool gradients) const { return whole(gradients, 0, whole_size()); }
    //! Elements [first, first + count) of whole(gradients), without building the rest.
    std::vector<T> whole(bool gradients, std::int64_t first, std::int64_t count) const
    {
        std::vector<T> out(static_cast<std::size_t>(count), T(0));
        for (const auto& s : states_) {
            if (!s) continue;
            const auto& v = gradients ? s->params.grad : s->params.value;
            for (const auto& t : s->params.lay.tensors) {
                if (t.tied_copy || t.replica_copy || t.global_offset >= first + count ||
                    t.global_offset + t.whole_size(tensor_) <= first)
                    continue;
                // The share's runs that are contiguous in the whole tensor, clipped to the piece.
                t.each_run(tensor_, 0, t.size(), [&](std::int64_t whole_first, std::int64_t mine, std::int64_t n) {
                    const std::int64_t at = t.global_offset + whole_first;
                    const std::int64_t lo = std::max(at, first), hi = std::min(at + n, first + count);
                    if (lo < hi)
                        std::copy_n(v.begin() + t.offset + mine + (lo - at), hi - lo, out.begin() + (lo - first));
                });
            }
        }
        return out;
    }
    //! The whole model's parameter count (the size of whole()).
    std::int64_t whole_size() const { return layout(cfg_).total; }
    const tensor_split& tensor() const { return tensor_; }
    //! Parameters held here, counted once (a tied copy is not).
    std::int64_t held_parameters() const
    {
        std::int64_t n = 0;
        each_tensor(false, [&](std::int64_t, std::span<const T> v) { n += static_cast<std::int64_t>(v.size()); });
        return n;
    }

private:
    struct state {
        parameters<T> params;
        adamw<T> opt;
        state(const config& c, const holding& h, adamw_options o) : params(c, h), opt(params, o) {}
    };
    state& at(int i) const
    {
        if (!holds(i)) throw std::invalid_argument("stage " + std::to_string(i) + "'s state is held by another process");
        return *states_[static_cast<std::size_t>(i)];
    }
    T* embedding_grad(int i) const { return at(i).params.grad.data() + at(i).params.lay.wte; }

    config cfg_;
    tensor_split tensor_;
    std::vector<std::unique_ptr<state>> states_;
    std::optional<tpipe::tied_gradient<T>> tie_;  //!< the tied head's copies held here
};

} // namespace gpt
