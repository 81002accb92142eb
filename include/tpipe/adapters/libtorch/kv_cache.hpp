#pragma once
// Token slices in libtorch modules: which unit a stage's forward runs (current_unit,
// context_tokens) and the keys and values of earlier slices (kv_cache). Part of
// tpipe/adapters/libtorch.hpp.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn.h>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"

namespace tpipe::libtorch {

namespace detail {
//! What one forward of one unit recorded while its modules ran (see kv_cache).
struct forward_frame {
    const unit* u = nullptr;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> produced;  //!< (cached value with graph, its leaf)
    std::vector<torch::Tensor> consumed;                           //!< leaves of earlier slices read
};
inline thread_local forward_frame* current_frame = nullptr;

struct frame_scope {
    forward_frame* previous;
    explicit frame_scope(forward_frame& f) : previous(current_frame) { current_frame = &f; }
    ~frame_scope() { current_frame = previous; }
    frame_scope(const frame_scope&) = delete;
    frame_scope& operator=(const frame_scope&) = delete;
};
} // namespace detail

//! The unit whose forward this thread runs (inside a module_stage's forward), or nullptr
//! (plain libtorch: the whole batch is one unit).
inline const unit* current_unit() noexcept
{
    return detail::current_frame ? detail::current_frame->u : nullptr;
}

//! Tokens before the current slice (its position offset): 0 outside a pipeline. A slice holds
//! the tokens [t0, t0 + tokens) of its rows, t0 = context_tokens(): positions are t0 + i, and
//! the causal mask of a query at slice position i allows keys [0, t0 + i] of the whole sequence
//! (the earlier slices' keys come from a kv_cache).
inline std::int64_t context_tokens() noexcept
{
    const unit* u = current_unit();
    return u ? u->token_begin : 0;
}

//! The keys and values of the earlier token slices of each microbatch, for causal attention
//! across slices (TeraPipe). A module owns one and calls extend() with its slice's keys and
//! values; it gets back those of every token up to the end of the slice.
//!
//! Gradients: an earlier slice's keys and values are kept as leaves, so that the backward of a
//! later slice accumulates into them instead of walking the earlier slice's graph (once per
//! later slice); the stage then starts the earlier slice's backward from its output and from its
//! cached keys and values with those accumulated gradients. Runs in the stage's thread, in the
//! runtime's slice order (forward in order, backward in reverse).
class kv_cache {
public:
    //! token_dim: the dimension of k and v that indexes tokens (default: -2, as in
    //! [rows, heads, tokens, head_dim]).
    explicit kv_cache(std::int64_t token_dim = -2) : dim_(token_dim) {}

    //! k, v of this slice -> k, v of tokens [0, slice end). Outside a pipeline: unchanged.
    std::pair<torch::Tensor, torch::Tensor> extend(const torch::Tensor& k, const torch::Tensor& v)
    {
        detail::forward_frame* f = detail::current_frame;
        if (!f) return {k, v};
        auto& earlier = by_microbatch_[f->u->microbatch];
        if (f->u->slice == 0) earlier.clear();
        if (static_cast<int>(earlier.size()) != f->u->slice)
            throw tpipe::invalid_argument("kv_cache: slice " + std::to_string(f->u->slice) + " of microbatch " +
                                          std::to_string(f->u->microbatch) + " arrived after " +
                                          std::to_string(earlier.size()) +
                                          " earlier slices; the slices of a microbatch must run in token order");
        std::vector<torch::Tensor> ks, vs;
        for (auto& [kl, vl] : earlier) {
            ks.push_back(kl);
            vs.push_back(vl);
            for (const auto* t : {&kl, &vl})
                if (t->requires_grad()) f->consumed.push_back(*t);
        }
        ks.push_back(k);
        vs.push_back(v);
        auto leaf = [](const torch::Tensor& t) { return t.detach().requires_grad_(t.requires_grad()); };
        earlier.emplace_back(leaf(k), leaf(v));
        f->produced.emplace_back(k, earlier.back().first);
        f->produced.emplace_back(v, earlier.back().second);
        return {torch::cat(ks, dim_), torch::cat(vs, dim_)};
    }

private:
    std::int64_t dim_;
    std::map<int, std::vector<std::pair<torch::Tensor, torch::Tensor>>> by_microbatch_;
};

} // namespace tpipe::libtorch
