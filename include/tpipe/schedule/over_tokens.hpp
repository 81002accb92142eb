#pragma once
// over_tokens(s): any microbatch schedule run over token units under the causal order. The inner
// schedule orders whole microbatches; each of its forwards becomes the microbatch's slices in
// ascending order and each backward (B, I, W) its slices in descending order (later slices add
// gradient into earlier K/V). This is how TeraPipe pipelines tokens with GPipe's order, and it
// works for a user's schedule that never looks at slices.
#include <string>

#include "tpipe/schedule/schedule.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe {

template <schedule S>
struct over_tokens_schedule {
    S inner;
    std::string label = std::string("tokens(").append(inner.name()).append(")");

    std::string_view name() const { return label; }
    tpipe::program program(const topology& t, const scheme& units) const
    {
        const tpipe::program whole = inner.program(t, tpipe::microbatches(units.microbatches()));
        microbatch_order order(whole.actions.size());
        for (std::size_t r = 0; r < whole.actions.size(); ++r)
            for (const auto& a : whole.actions[r]) {
                if (a.slice != 0)
                    throw invalid_argument("over_tokens: " + std::string(inner.name()) +
                                           " already names token slices ('" + to_string(a) +
                                           "'); give it a schedule that orders whole microbatches");
                order[r].push_back(microbatch_step{a.stage, a.kind, a.microbatch});
            }
        return expand_slices(whole.ranks, whole.stage_rank, units, order);
    }
};

//! `over_tokens(zb_h1{})`: the schedule `s` over the token slices of whatever scheme it is given.
template <schedule S>
over_tokens_schedule<S> over_tokens(S s)
{
    return over_tokens_schedule<S>{std::move(s)};
}

} // namespace tpipe
