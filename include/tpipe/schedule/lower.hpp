#pragma once
// Lowering inserts communication into a compute-only program: a SEND right after each compute
// whose consumer stage lives on another rank, and the matching RECV (which posts the receive)
// right before the consumer, which waits for the payload. Sends are eager and each receive is
// posted just before the compute that needs it, so the lowered program blocks exactly where the
// compute-only one waits: lowering cannot create a deadlock that was not already there. Other
// actions (PyTorch's REDUCE_GRAD, UNSHARD, ...) are kept in place; an OVERLAP_F_B group gets the
// receives of its computes before it and their sends after it, so the group stays whole.
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
        auto receives = [&](const action& a) {
            if (a.kind == op::F && remote(a.stage - 1)) row.push_back({a.stage, op::RECV_F, a.microbatch, a.slice});
            if ((a.kind == op::B || a.kind == op::I) && remote(a.stage + 1))
                row.push_back({a.stage, op::RECV_B, a.microbatch, a.slice});
        };
        auto sends = [&](const action& a) {
            if (a.kind == op::F && remote(a.stage + 1)) row.push_back({a.stage, op::SEND_F, a.microbatch, a.slice});
            if ((a.kind == op::B || a.kind == op::I) && remote(a.stage - 1))
                row.push_back({a.stage, op::SEND_B, a.microbatch, a.slice});
        };
        const auto& in = p.actions[r];
        for (std::size_t i = 0; i < in.size(); ++i) {
            const std::size_t n = in[i].kind == op::OVERLAP_F_B ? static_cast<std::size_t>(in[i].microbatch) + 1 : 1;
            if (i + n > in.size())
                throw invalid_argument("lower: rank " + std::to_string(r) + " ends inside an OVERLAP_F_B group");
            for (std::size_t k = i; k < i + n; ++k) receives(in[k]);
            for (std::size_t k = i; k < i + n; ++k) row.push_back(in[k]);
            for (std::size_t k = i; k < i + n; ++k) sends(in[k]);
            i += n - 1;
        }
    }
    return out;
}

} // namespace tpipe
