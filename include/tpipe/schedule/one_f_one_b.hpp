#pragma once
// 1F1B (PipeDream-flush): rank r warms up with P-1-r forwards, then alternates one forward and
// one backward, then drains. Same makespan as GPipe, at most P-r microbatches alive on rank r.
#include <algorithm>

#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct one_f_one_b {
    //! Forwards beyond the minimum (P-1-r) that rank r runs before its first backward: more
    //! activations alive, more slack for uneven stages or transfer latency.
    int extra_warmup = 0;

    constexpr std::string_view name() const { return "1f1b"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        if (extra_warmup < 0) detail::refuse("extra_warmup must be >= 0, got " + std::to_string(extra_warmup));
        const int P = t.ranks, M = units.microbatches();
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) {
            const int warmup = std::min(P - 1 - r + extra_warmup, M);
            int f = 0, b = 0;
            for (; f < warmup; ++f) order[r].push_back({r, op::F, f});
            for (; f < M; ++f, ++b) {
                order[r].push_back({r, op::F, f});
                order[r].push_back({r, op::B, b});
            }
            for (; b < M; ++b) order[r].push_back({r, op::B, b});
        }
        return expand_slices(P, loop_placement(P, P), units, order);
    }
};

} // namespace tpipe
