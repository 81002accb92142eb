#pragma once
// The schedule concept and the one building block every schedule uses: a per-rank order of
// microbatch-level work, expanded over the scheme's token slices with the causal rule
// (forward of a microbatch's slices in ascending order, backward in descending order).
// That expansion is what runs any microbatch schedule over token units (TeraPipe).
#include <concepts>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/schedule/program.hpp"

namespace tpipe {

//! A schedule turns a topology and the units of one iteration into a compute-only program.
template <class S>
concept schedule = requires(const S& s, const topology& t, const scheme& units) {
    { s.program(t, units) } -> std::same_as<tpipe::program>;
    { s.name() } -> std::convertible_to<std::string_view>;
};

//! One entry of a microbatch-level order: a compute of one stage over a whole microbatch (its
//! token slices are laid out by expand_slices), or an OVERLAP_F_B group header (then
//! `microbatch` counts the entries of the group that follow it; stage -1).
struct microbatch_step {
    int stage = 0;
    op kind = op::F;
    int microbatch = 0;
    friend constexpr bool operator==(const microbatch_step&, const microbatch_step&) = default;
};

//! The header of a group of the `n` entries that follow it (PyTorch's OVERLAP_F_B).
constexpr microbatch_step overlap_step(int n) { return microbatch_step{-1, op::OVERLAP_F_B, n}; }

//! Per rank, microbatch-level work in order.
using microbatch_order = std::vector<std::vector<microbatch_step>>;

//! Expands a microbatch-level order over the token slices of `units`.
constexpr program expand_slices(int ranks, std::vector<int> stage_rank, const scheme& units,
                                const microbatch_order& order)
{
    program p;
    p.ranks = ranks;
    p.stage_rank = std::move(stage_rank);
    p.units = units;
    p.actions.assign(ranks, {});
    for (int r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < order[r].size(); ++i) {
            const microbatch_step& a = order[r][i];
            if (a.kind == op::OVERLAP_F_B) {  // the group now holds every slice of its actions
                int n = 0;
                for (int k = 1; k <= a.microbatch && i + k < order[r].size(); ++k) {
                    const int m = order[r][i + k].microbatch;
                    n += m >= 0 && m < units.microbatches() ? units.slices(m) : 1;  // a bad one is refused below
                }
                p.actions[r].push_back(overlap_header(n));
                continue;
            }
            if (a.microbatch < 0 || a.microbatch >= units.microbatches())
                throw invalid_argument("schedule order names microbatch " + std::to_string(a.microbatch) +
                                       " but the scheme has " + std::to_string(units.microbatches()));
            const int n = units.slices(a.microbatch);
            for (int i = 0; i < n; ++i) {
                const int slice = a.kind == op::F ? i : n - 1 - i;  // causal: backward in reverse
                p.actions[r].push_back(action{a.stage, a.kind, a.microbatch, slice});
            }
        }
    return p;
}

namespace detail {
constexpr void require_microbatches_at_least(int have, int need, std::string_view who)
{
    if (have < need)
        refuse(std::string(who) + " needs at least " + std::to_string(need) + " microbatches, got " +
               std::to_string(have));
}
} // namespace detail

} // namespace tpipe
