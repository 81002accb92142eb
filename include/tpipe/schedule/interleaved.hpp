#pragma once
// Interleaved 1F1B (Megatron-LM): each rank holds V model chunks (stages r, r+P, r+2P, ...),
// microbatches advance in groups of P through the chunks depth-first. Bubble shrinks by V.
// Needs the microbatch count to be a multiple of the rank count.
#include <algorithm>

#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct interleaved_1f1b {
    int virtual_stages = 2;  //!< model chunks per rank (V)

    constexpr std::string_view name() const { return "interleaved"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, V = virtual_stages, M = units.microbatches();
        if (V < 1) detail::refuse("interleaved 1F1B needs virtual_stages >= 1, got " + std::to_string(V));
        if (M % P != 0)
            detail::refuse("interleaved 1F1B needs the microbatch count to be a multiple of the rank count " +
                           std::to_string(P) + ", got " + std::to_string(M) + "; use " +
                           std::to_string(std::max(P, M / P * P)) + " or " + std::to_string((M / P + 1) * P));
        const int total = M * V;
        // The k-th forward (backward) of a rank: which chunk and which microbatch.
        auto chunk = [&](int k, bool forward) {
            const int c = (k % (P * V)) / P;
            return forward ? c : V - 1 - c;
        };
        auto micro = [&](int k) { return (k / (P * V)) * P + k % P; };
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) {
            const int warmup = std::min((P - r - 1) * 2 + (V - 1) * P, total);
            auto fwd = [&](int k) { order[r].push_back({chunk(k, true) * P + r, op::F, micro(k), 0}); };
            auto bwd = [&](int k) { order[r].push_back({chunk(k, false) * P + r, op::B, micro(k), 0}); };
            int f = 0, b = 0;
            for (; f < warmup; ++f) fwd(f);
            for (; f < total; ++f, ++b) {
                fwd(f);
                bwd(b);
            }
            for (; b < total; ++b) bwd(b);
        }
        return expand_slices(P, loop_placement(P, P * V), units, order);
    }
};

} // namespace tpipe
