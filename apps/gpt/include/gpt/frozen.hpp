#pragma once
// The GPT's frozen prefix: the embeddings and layers [0, F) once they train no more
// (PipeTransformer's AutoFreeze freezes a prefix). It runs forward only, one sample at a time,
// and keeps nothing once a call returns: no activations for a backward, no gradients, no
// optimizer state (gpt::adamw::freeze releases that). Its output is stage 0's input of the
// pipeline over the active layers (gpt::pipelined_model with cuts starting at F).
//
// AutoCache: with a tpipe::elastic::activation_cache, each sample's output is kept at its freeze
// level; when more layers have frozen since (F_prev -> F), only layers [F_prev, F) run, on the
// cached output (tpipe::elastic::frozen_outputs decides; this class runs the layers).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include <tpipe/elastic/cache.hpp>
#include <tpipe/elastic/frozen_outputs.hpp>

#include "gpt/model.hpp"
#include "gpt/pipeline.hpp"

namespace gpt {

template <class T>
class frozen_prefix {
public:
    using cache_type = tpipe::elastic::activation_cache<activation<T>>;

    //! `threads`: the GEMM threads of the forward. `cache` (optional, shared) outlives this.
    frozen_prefix(parameters<T>& params, int threads, cache_type* cache = nullptr);
    ~frozen_prefix();
    frozen_prefix(frozen_prefix&&) noexcept;
    frozen_prefix& operator=(frozen_prefix&&) noexcept;

    //! The output of the embeddings and layers [0, frozen) for the rows of `b`, row r being
    //! sample `ids[r]`: [b.rows, b.seq_len, d_model]. frozen >= 1.
    activation<T> forward(const batch& b, std::span<const std::int64_t> ids, int frozen);

    //! Rows computed from the tokens, extended from a cached lower level, and served from the
    //! cache as they were, since construction.
    using counters = tpipe::elastic::frozen_counters;
    const counters& count() const { return count_; }

    //! One sample's output (`one` has one row): layers [from, to) on `x`, or on its tokens (from
    //! == 0, embeddings included). No cache.
    activation<T> run(const batch& one, activation<T> x, int from, int to);

private:
    parameters<T>* params_;
    int threads_;
    cache_type* cache_;
    std::map<std::tuple<int, int>, std::unique_ptr<part<T>>> parts_;  // by layer range
    counters count_;
};

//! A unit's rows and tokens of a [rows, tokens, d] activation (what stage 0 takes).
template <class T>
activation<T> unit_slice(const activation<T>& all, const tpipe::unit& u, std::int64_t d);

} // namespace gpt
