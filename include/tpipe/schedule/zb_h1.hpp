#pragma once
// ZB-H1 (zero-bubble, Qi et al. 2023): 1F1B with the backward split into I (input gradient, on
// the critical path) and W (weight gradient, off it). Rank r keeps up to r weight gradients
// pending, which lets the input-gradient chain of the cool-down run without waiting; the W's
// fill the gaps. Peak live microbatches stay at 1F1B's P; bubble (P-1)(F+I-W) instead of
// (P-1)(F+I+W).
#include <algorithm>

#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct zb_h1 {
    //! Forwards beyond the minimum (P-1-r) that rank r runs before its first backward: more
    //! activations alive, more slack for uneven stages or transfer latency.
    int extra_warmup = 0;

    constexpr std::string_view name() const { return "zb-h1"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        if (extra_warmup < 0) detail::refuse("extra_warmup must be >= 0, got " + std::to_string(extra_warmup));
        const int P = t.ranks, M = units.microbatches();
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) {
            auto& row = order[r];
            const int warmup = std::min(P - 1 - r + extra_warmup, M), lag = r;
            int f = 0, i = 0, w = 0;
            for (; f < warmup; ++f) row.push_back({r, op::F, f});
            for (; f < M; ++f) {
                row.push_back({r, op::F, f});
                row.push_back({r, op::I, i++});
                if (i - w > lag) row.push_back({r, op::W, w++});
            }
            while (i < M) {  // cool-down: one W after each I fills the wait for the next gradient
                row.push_back({r, op::I, i++});
                row.push_back({r, op::W, w++});
            }
            while (w < M) row.push_back({r, op::W, w++});
        }
        return expand_slices(P, loop_placement(P, P), units, order);
    }
};

} // namespace tpipe
