#pragma once
// DualPipeV (DeepSeek's DualPipe cut in half, PyTorch's ScheduleDualPipeV): V placement (rank r
// holds stages r and 2P-1-r) and eight phases per rank: first-chunk forwards; pairs of forwards;
// I + W + second-chunk forward; the steady state, where a forward of one chunk and a full
// backward of the other form one OVERLAP_F_B step (a runtime may interleave their kernels to
// hide communication); backwards with overlapped pairs; backwards switching to I (the zero-
// bubble half); I's with the pending W's; the last W's. Needs M >= 2P.
#include <vector>

#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct dualpipe_v {
    bool overlap = true;  //!< emit the F+B pairs as OVERLAP_F_B groups (false: the same order, ungrouped)

    constexpr std::string_view name() const { return "dualpipe-v"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, M = units.microbatches(), S = 2 * P;
        detail::require_microbatches_at_least(M, S, "DualPipeV (2 stages per rank)");
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) order[r] = rank_order(P, M, r);
        return expand_slices(P, v_placement(P), units, order);
    }

private:
    constexpr std::vector<microbatch_step> rank_order(int P, int M, int r) const
    {
        const int S = 2 * P, c0 = r, c1 = S - 1 - r;
        std::vector<microbatch_step> row;
        // Next microbatch per (chunk, kind): forwards, input gradients (B counts as one), weights.
        int next_f[2] = {0, 0}, next_i[2] = {0, 0}, next_w[2] = {0, 0};
        std::vector<microbatch_step> weights;  // pending W's, oldest first
        std::size_t w_head = 0;
        auto chunk = [&](int stage) { return stage == c0 ? 0 : 1; };
        auto forward = [&](int stage) { row.push_back({stage, op::F, next_f[chunk(stage)]++}); };
        auto backward = [&](int stage, bool split) {
            const int c = chunk(stage), m = next_i[c]++;
            if (split) {
                row.push_back({stage, op::I, m});
                weights.push_back({stage, op::W, m});
            } else {
                row.push_back({stage, op::B, m});
                ++next_w[c];
            }
        };
        auto weight = [&] {
            if (w_head == weights.size()) return;
            row.push_back(weights[w_head++]);
            ++next_w[chunk(row.back().stage)];
        };
        auto pair = [&](int f_stage, int b_stage) {
            if (overlap) row.push_back(overlap_step(2));
            forward(f_stage);
            backward(b_stage, false);
        };
        for (int k = 0; k < 2 * (P - r - 1); ++k) forward(c0);
        for (int k = 0; k < r + 1; ++k) {
            forward(c0);
            forward(c1);
        }
        for (int k = 0; k < P - r - 1; ++k) {
            backward(c1, true);
            weight();
            forward(c1);
        }
        for (int k = 0; k < M - 2 * P + r + 1; ++k) {
            if (k == 0 && r == P - 1) {
                forward(c0);
                backward(c1, false);
            } else {
                pair(c0, c1);
            }
            pair(c1, c0);
        }
        for (int k = 0; k < P - r - 1; ++k) {
            backward(c1, false);
            pair(c1, c0);
        }
        bool zb = false;
        for (int k = 0; k < r + 1; ++k) {
            if (k == (r + 1) / 2 && r % 2 == 1) zb = true;
            backward(c1, zb);
            if (k == (r + 1) / 2 && r % 2 == 0) zb = true;
            backward(c0, zb);
        }
        for (int k = 0; k < P - r - 1; ++k) {
            weight();
            backward(c0, zb);
        }
        for (int k = 0; k < r + 1; ++k) weight();
        return row;
    }
};

} // namespace tpipe
