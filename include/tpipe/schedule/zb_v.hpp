#pragma once
// ZB-V (zero-bubble V shape): 2P stages, rank r holds stages r and 2P-1-r, so a microbatch goes
// down the ranks and comes back up, and the first and last stage share rank 0. Two orders:
//
// - `paper`: the zero-bubble paper's hand-written order (as PyTorch's ScheduleZBVZeroBubble
//   writes it): warm-up of 2(P-r)-1 first-chunk forwards, r pairs of forwards, P-r (F I W) of
//   the second chunk, a steady F I W on each chunk in turn, cool-down of I's then W's. Built for
//   F = I = W and for M >= 2P-1 (smaller M runs that order with the missing microbatches left out).
// - `list`: list scheduling with unit costs (F = I = W): a free rank starts the action that can
//   start earliest, preferring input gradients, then forwards of the second chunk, then of the
//   first, then weight gradients; a microbatch enters rank r's first chunk only while its two
//   chunk activations fit under 2P alive on that rank (1F1B's peak, in half-size chunks).
//
// `best` (the default) builds both and keeps the shorter at F = I = W (the paper's on a tie).
#include <algorithm>
#include <vector>

#include "tpipe/schedule/replay.hpp"
#include "tpipe/schedule/schedule.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe {

namespace detail {
//! The paper's hand-written ZB-V order of rank r (PyTorch's `_calculate_single_rank_operations`).
constexpr std::vector<microbatch_step> zb_v_paper_rank(int P, int M, int r)
{
    const int S = 2 * P, n = std::max(2 * P - 1, M), c0 = r, c1 = S - 1 - r;
    std::vector<microbatch_step> row;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    auto put = [&](int stage, op kind, int mb) {
        if (mb < M) row.push_back({stage, kind, mb});  // microbatches past M are left out
    };
    for (int k = 0; k < 2 * (P - r) - 1; ++k) put(c0, op::F, f0++);
    for (int k = 0; k < r; ++k) {
        put(c1, op::F, f1++);
        put(c0, op::F, f0++);
    }
    for (int k = 0; k < P - r; ++k) {
        put(c1, op::F, f1++);
        put(c1, op::I, b1);
        put(c1, op::W, b1++);
    }
    while (f1 < f0 || f0 < n) {
        if (f0 < n) put(c0, op::F, f0++);
        put(c0, op::I, b0);
        put(c0, op::W, b0++);
        put(c1, op::F, f1++);
        put(c1, op::I, b1);
        put(c1, op::W, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int k = 0; k < r; ++k) {
        put(c0, op::I, b0++);
        put(c1, op::I, b1++);
    }
    for (int k = 0; k < P - r; ++k) {
        put(c0, op::I, b0++);
        put(c0, op::W, w0++);
    }
    while (w1 < b1) put(c1, op::W, w1++);
    while (w0 < b0) put(c0, op::W, w0++);
    return row;
}

//! Makespan at F = I = W = 1 (B = 2), no transfer time; -1 if the program is invalid.
constexpr double unit_makespan(const program& p)
{
    struct timing {
        double end = 0;
        constexpr double compute(const action& a, const unit&) const { return a.kind == op::B ? 2 : is_compute(a.kind) ? 1 : 0; }
        constexpr double transfer(const action&, int, int, const unit&) const { return 0; }
        constexpr void record(int, const action&, double, double e) { end = end < e ? e : end; }
        constexpr void live(int, int) const {}
    } t;
    return replayer<timing>(p, t).run().ok() ? t.end : -1;
}
} // namespace detail

struct zb_v {
    enum class order : unsigned char { best, paper, list };
    order pick = order::best;  //!< which order to build (see above)

    constexpr std::string_view name() const { return "zb-v"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, M = units.microbatches();
        microbatch_order paper(P);
        for (int r = 0; r < P; ++r) paper[r] = detail::zb_v_paper_rank(P, M, r);
        if (pick == order::paper) return expand_slices(P, v_placement(P), units, paper);
        microbatch_order list = list_rows(P, M);
        if (pick == order::list) return expand_slices(P, v_placement(P), units, list);
        // Compared over whole microbatches: either order runs the same over any slicing.
        const scheme whole = tpipe::microbatches(M);
        const bool list_wins = detail::unit_makespan(expand_slices(P, v_placement(P), whole, list)) <
                               detail::unit_makespan(expand_slices(P, v_placement(P), whole, paper));
        return expand_slices(P, v_placement(P), units, list_wins ? list : paper);
    }

private:
    //! The list-scheduled order (microbatch level).
    constexpr microbatch_order list_rows(int P, int M) const
    {
        const int S = 2 * P;
        const auto place = v_placement(P);
        auto idx = [&](int s, int m) { return static_cast<std::size_t>(s) * static_cast<std::size_t>(M) + m; };
        std::vector<double> f_end(static_cast<std::size_t>(S) * M, -1), i_end(f_end);

        struct rank_state {
            int next_f[2] = {0, 0};
            int next_i[2] = {0, 0};
            std::vector<int> w_stage, w_mb;  // pending weight gradients, oldest first
            std::size_t w_head = 0;
            int live = 0;
            double free_at = 0;
        };
        std::vector<rank_state> st(P);
        auto stage_of = [&](int r, int c) { return c == 0 ? r : S - 1 - r; };

        struct choice {
            op kind = op::F;
            int stage = -1, mb = -1;
            double start = 0;
            bool valid = false;
        };
        // The action rank r would start next, and when.
        auto best = [&](int r) {
            const rank_state& s = st[r];
            choice c;
            int rank_of_pick = 99;
            auto offer = [&](op kind, int stage, int mb, double ready, int priority) {
                const double start = ready > s.free_at ? ready : s.free_at;
                if (!c.valid || start < c.start || (start == c.start && priority < rank_of_pick)) {
                    c = choice{kind, stage, mb, start, true};
                    rank_of_pick = priority;
                }
            };
            for (int ch = 1; ch >= 0; --ch) {  // input gradients
                const int stage = stage_of(r, ch), m = s.next_i[ch];
                if (m >= M || f_end[idx(stage, m)] < 0) continue;
                double ready = f_end[idx(stage, m)];
                if (stage + 1 < S) {
                    if (i_end[idx(stage + 1, m)] < 0) continue;
                    ready = ready > i_end[idx(stage + 1, m)] ? ready : i_end[idx(stage + 1, m)];
                }
                offer(op::I, stage, m, ready, 1 - ch);
            }
            for (int ch = 1; ch >= 0; --ch) {  // forwards; new microbatches only under the memory cap
                const int stage = stage_of(r, ch), m = s.next_f[ch];
                // A first-chunk forward brings this microbatch back as a second-chunk activation
                // later: admit it only if both fit under the cap, counting those still away.
                if (m >= M || (ch == 0 && s.live + (s.next_f[0] - s.next_f[1]) + 2 > S)) continue;
                double ready = 0;
                if (stage > 0) {
                    if (f_end[idx(stage - 1, m)] < 0) continue;
                    ready = f_end[idx(stage - 1, m)];
                }
                offer(op::F, stage, m, ready, 3 - ch);
            }
            if (s.w_head < s.w_stage.size())
                offer(op::W, s.w_stage[s.w_head], s.w_mb[s.w_head], i_end[idx(s.w_stage[s.w_head], s.w_mb[s.w_head])], 4);
            return c;
        };

        microbatch_order order(P);
        std::vector<choice> cand(P);
        std::vector<bool> dirty(P, true);
        for (long remaining = 3L * S * M; remaining > 0; --remaining) {
            int pick = -1;
            for (int r = 0; r < P; ++r) {
                if (dirty[r]) {
                    cand[r] = best(r);
                    dirty[r] = false;
                }
                if (cand[r].valid && (pick < 0 || cand[r].start < cand[pick].start)) pick = r;
            }
            if (pick < 0) throw error("zb-v: list scheduling stalled (internal error)");
            const choice c = cand[pick];
            rank_state& s = st[pick];
            const double end = c.start + 1;
            s.free_at = end;
            const int ch = c.stage == stage_of(pick, 0) ? 0 : 1;
            if (c.kind == op::F) {
                f_end[idx(c.stage, c.mb)] = end;
                ++s.next_f[ch];
                ++s.live;
            } else if (c.kind == op::I) {
                i_end[idx(c.stage, c.mb)] = end;
                ++s.next_i[ch];
                s.w_stage.push_back(c.stage);
                s.w_mb.push_back(c.mb);
            } else {
                ++s.w_head;
                --s.live;
            }
            order[pick].push_back({c.stage, c.kind, c.mb});
            dirty[pick] = true;
            if (c.stage > 0) dirty[place[c.stage - 1]] = true;
            if (c.stage + 1 < S) dirty[place[c.stage + 1]] = true;
        }
        return order;
    }
};

} // namespace tpipe
