#pragma once
// Interleaved 1F1B (Megatron-LM): each rank holds V model chunks (stages r, r+P, r+2P, ...);
// microbatches advance in rounds of G through the chunks depth-first. Bubble shrinks by V.
// As in PyTorch, M need not be a multiple of P: there are max(1, M / P) rounds of G = M / rounds
// microbatches, which works whenever the rounds divide M (P = 4: M = 3, 6, 10 are fine, 9 is not).
#include <algorithm>

#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

namespace detail {
//! Rounds of an interleaved schedule (PyTorch's flexible rule); refuses M the rounds do not divide.
constexpr int interleaved_round_size(int P, int M, std::string_view who)
{
    const int rounds = std::max(1, M / P);
    if (M % rounds != 0)
        refuse(std::string(who) + " runs max(1, M/P) = " + std::to_string(rounds) +
               " rounds of equal size, which do not divide M = " + std::to_string(M) + " (P = " + std::to_string(P) +
               "); use M = " + std::to_string(M / rounds * rounds) + " or " + std::to_string((M / rounds + 1) * rounds) +
               ", or any multiple of P");
    return M / rounds;
}

//! One rank's interleaved order: warm-up forwards, then one forward and one backward per step,
//! then the remaining backwards. With `zero_bubble` the backward is I, and from step `rank` of
//! the steady phase on a W follows each step (the oldest pending), the rest at the end (ZB1P).
//! The k-th forward of a rank runs chunk (k / G) mod V, the k-th backward chunk V-1-(k / G) mod V.
constexpr std::vector<microbatch_step> interleaved_rank_order(int P, int V, int M, int G, int r, bool zero_bubble)
{
    const int total = M * V;
    const int warmup = std::min((V - 1) * G + (zero_bubble ? 1 : 2) * (P - 1 - r), total);
    auto fwd_stage = [&](int k) { return (k / G) % V * P + r; };
    auto bwd_stage = [&](int k) { return (V - 1 - (k / G) % V) * P + r; };
    std::vector<int> next(P * V, 0), next_b(P * V, 0), next_w(P * V, 0), w_stages;
    std::vector<microbatch_step> row;
    std::size_t w = 0;
    auto weight = [&] {
        const int s = w_stages[w++];
        row.push_back({s, op::W, next_w[s]++});
    };
    auto backward = [&](int b) {
        const int s = bwd_stage(b);
        row.push_back({s, zero_bubble ? op::I : op::B, next_b[s]++});
        w_stages.push_back(s);
        if (zero_bubble && b >= r) weight();
    };
    int f = 0, b = 0;
    for (; f < warmup; ++f) row.push_back({fwd_stage(f), op::F, next[fwd_stage(f)]++});
    for (; f < total; ++f, ++b) {
        row.push_back({fwd_stage(f), op::F, next[fwd_stage(f)]++});
        backward(b);
    }
    for (; b < total; ++b) backward(b);
    while (zero_bubble && w < w_stages.size()) weight();
    return row;
}
} // namespace detail

struct interleaved_1f1b {
    int virtual_stages = 2;  //!< model chunks per rank (V)

    constexpr std::string_view name() const { return "interleaved"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, V = virtual_stages, M = units.microbatches();
        if (V < 1) detail::refuse("interleaved 1F1B needs virtual_stages >= 1, got " + std::to_string(V));
        const int G = detail::interleaved_round_size(P, M, "interleaved 1F1B");
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) order[r] = detail::interleaved_rank_order(P, V, M, G, r, false);
        return expand_slices(P, loop_placement(P, P * V), units, order);
    }
};

} // namespace tpipe
