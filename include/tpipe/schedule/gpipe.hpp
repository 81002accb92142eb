#pragma once
// GPipe: every rank runs all forwards, then all backwards (in microbatch order).
// Over token slices this is TeraPipe's own schedule.
#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct gpipe {
    constexpr std::string_view name() const { return "gpipe"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int M = units.microbatches();
        microbatch_order order(t.ranks);
        for (int r = 0; r < t.ranks; ++r) {
            for (int m = 0; m < M; ++m) order[r].push_back({r, op::F, m});
            for (int m = 0; m < M; ++m) order[r].push_back({r, op::B, m});
        }
        return expand_slices(t.ranks, loop_placement(t.ranks, t.ranks), units, order);
    }
};

} // namespace tpipe
