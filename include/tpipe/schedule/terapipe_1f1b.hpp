#pragma once
// Token-level 1F1B: 1F1B over (microbatch x token slice) units. Forwards run units in order
// (slices ascending); backwards run microbatches in order with their slices descending, so the
// K/V gradients of a slice are complete before its own backward. Rank r warms up with P-1-r
// forwards plus the slices the first backward needs, then alternates. Fewer activations stay
// alive than with microbatch-level 1F1B over the same units.
#include <algorithm>

#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct terapipe_1f1b {
    constexpr std::string_view name() const { return "terapipe-1f1b"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, U = units.units();
        // Backward order: microbatches ascending, slices descending; as dense unit indices.
        std::vector<int> bwd;
        for (int m = 0; m < units.microbatches(); ++m)
            for (int s = units.slices(m) - 1; s >= 0; --s) bwd.push_back(units.index(m, s));

        tpipe::program p;
        p.ranks = P;
        p.stage_rank = loop_placement(P, P);
        p.units = units;
        p.actions.assign(P, {});
        for (int r = 0; r < P; ++r) {
            auto& row = p.actions[r];
            auto emit = [&](op kind, int u) {
                const unit x = units.at(u);
                row.push_back({r, kind, x.microbatch, x.slice});
            };
            int f = 0;
            const int warmup = std::min(U, P - 1 + units.slices(0) - 1 - r);
            for (; f < warmup; ++f) emit(op::F, f);
            for (int k = 0; k < U; ++k) {
                const int target = std::max(std::min(f + 1, U), bwd[k] + 1);  // one forward, and the one needed
                for (; f < target; ++f) emit(op::F, f);
                emit(op::B, bwd[k]);
            }
        }
        return p;
    }
};

} // namespace tpipe
