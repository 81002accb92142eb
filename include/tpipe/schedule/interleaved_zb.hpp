#pragma once
// Interleaved zero-bubble (ZB1P of Qi et al., PyTorch's ScheduleInterleavedZeroBubble): the
// interleaved 1F1B order over V chunks per rank with the backward split into I and W; warm-up
// one forward per hop instead of two, and rank r defers its first r weight gradients, which then
// fill the cool-down. Same rounds rule for M as interleaved 1F1B.
#include "tpipe/schedule/interleaved.hpp"

namespace tpipe {

struct interleaved_zb {
    int virtual_stages = 2;  //!< model chunks per rank (V)

    constexpr std::string_view name() const { return "interleaved-zb"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, V = virtual_stages, M = units.microbatches();
        if (V < 1) detail::refuse("interleaved zero-bubble needs virtual_stages >= 1, got " + std::to_string(V));
        const int G = detail::interleaved_round_size(P, M, "interleaved zero-bubble");
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) order[r] = detail::interleaved_rank_order(P, V, M, G, r, true);
        return expand_slices(P, loop_placement(P, P * V), units, order);
    }
};

} // namespace tpipe
