#pragma once
// Lowering inserts communication into a compute-only program: a SEND right after each compute
// whose consumer stage lives on another rank, and the matching RECV right before the consumer.
// Because sends are eager and each receive sits just before the compute that needs it, the
// lowered program blocks exactly where the compute-only one waits: lowering cannot create a
// deadlock that was not already there.
#include "tpipe/schedule/program.hpp"

namespace tpipe {

constexpr program lower(const program& p)
{
    if (p.lowered()) throw invalid_argument("lower: the program already contains sends and receives");
    program out = p;
    const int S = p.stages();
    for (int r = 0; r < p.ranks; ++r) {
        auto& row = out.actions[r];
        row.clear();
        auto remote = [&](int s) { return s >= 0 && s < S && p.stage_rank[s] != r; };
        for (const action& a : p.actions[r]) {
            const bool fwd = a.kind == op::F, bwd = a.kind == op::B || a.kind == op::I;
            if (fwd && remote(a.stage - 1)) row.push_back({a.stage, op::RECV_F, a.microbatch, a.slice});
            if (bwd && remote(a.stage + 1)) row.push_back({a.stage, op::RECV_B, a.microbatch, a.slice});
            row.push_back(a);
            if (fwd && remote(a.stage + 1)) row.push_back({a.stage, op::SEND_F, a.microbatch, a.slice});
            if (bwd && remote(a.stage - 1)) row.push_back({a.stage, op::SEND_B, a.microbatch, a.slice});
        }
    }
    return out;
}

} // namespace tpipe
