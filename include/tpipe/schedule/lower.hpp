#pragma once
// Lowering inserts communication into a compute-only program: a SEND right after each compute
// whose consumer stage lives on another rank, and the matching RECV (which posts the receive)
// before the consumer, which waits for the payload. Each receive is posted as late as possible
// under one rule: a rank posts the receives from one peer in the order that peer sends, because
// transports that match messages between two ranks in order (PyTorch's batched P2P over gloo or
// NCCL) would otherwise hand a payload to the wrong receive — silently, when shapes agree. So a
// receive sits just before its consumer, or earlier, before the receive of a payload sent after
// it. Sends are eager and receives only post, so the lowered program blocks exactly where the
// compute-only one waits: lowering cannot create a deadlock that was not already there. Other
// actions (PyTorch's REDUCE_GRAD, UNSHARD, ...) are kept in place; an OVERLAP_F_B group gets the
// receives of its computes before it and their sends after it, so the group stays whole.
#include <algorithm>

#include "tpipe/schedule/program.hpp"

namespace tpipe {

namespace detail {
//! The send that fills receive `a` (RECV_F of stage s comes from SEND_F of s-1, RECV_B from SEND_B of s+1).
constexpr action send_of(const action& a)
{
    return a.kind == op::RECV_F ? action{a.stage - 1, op::SEND_F, a.microbatch, a.slice}
                                : action{a.stage + 1, op::SEND_B, a.microbatch, a.slice};
}

//! Moves rank r's receives earlier where needed so that, per peer, they follow the peer's send
//! order; each stays as late as that allows. `send_pos[send_key(send)]` is where a send stands
//! in its rank's list.
constexpr std::size_t send_key(const program& p, const action& send)
{
    return (static_cast<std::size_t>(send.stage) * static_cast<std::size_t>(p.units.units()) +
            static_cast<std::size_t>(p.units.index(send.microbatch, send.slice))) * 2 + (send.kind == op::SEND_B);
}
constexpr void order_receives_by_send(program& p, int r, const std::vector<std::size_t>& send_pos)
{
    struct recv {
        action a;
        int peer = 0;
        std::size_t send_at = 0;  // position of its send in the peer's list
        std::size_t anchor = 0;   // position, in the list without receives, it must precede
    };
    std::vector<action> rest;
    std::vector<recv> recvs;
    for (const action& a : p.actions[r]) {
        if (a.kind != op::RECV_F && a.kind != op::RECV_B) {
            rest.push_back(a);
            continue;
        }
        const action send = send_of(a);
        recvs.push_back({a, p.stage_rank[send.stage], send_pos[send_key(p, send)], rest.size()});
    }
    // Per peer, in send order, a receive may not come after the next one: suffix minimum of anchors.
    std::vector<std::size_t> order(recvs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
        return recvs[x].peer != recvs[y].peer ? recvs[x].peer < recvs[y].peer : recvs[x].send_at < recvs[y].send_at;
    });
    for (std::size_t k = order.size(); k-- > 1;)
        if (recvs[order[k - 1]].peer == recvs[order[k]].peer)
            recvs[order[k - 1]].anchor = std::min(recvs[order[k - 1]].anchor, recvs[order[k]].anchor);
    // Rebuild: before each entry of `rest`, the receives anchored there (by peer, in send order).
    std::sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
        const recv &a = recvs[x], &b = recvs[y];
        return a.anchor != b.anchor ? a.anchor < b.anchor : a.peer != b.peer ? a.peer < b.peer : a.send_at < b.send_at;
    });
    std::vector<action> row;
    std::size_t next = 0;
    for (std::size_t i = 0; i <= rest.size(); ++i) {
        for (; next < order.size() && recvs[order[next]].anchor == i; ++next) row.push_back(recvs[order[next]].a);
        if (i < rest.size()) row.push_back(rest[i]);
    }
    p.actions[r] = std::move(row);
}
} // namespace detail

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
    for (const auto& row : out.actions)  // units outside the scheme: leave it to validation to say so
        for (const auto& a : row)
            if (is_comm(a.kind) && !p.units.contains(a.microbatch, a.slice)) return out;
    std::vector<std::size_t> send_pos(static_cast<std::size_t>(S) * static_cast<std::size_t>(p.units.units()) * 2, 0);
    for (const auto& row : out.actions)
        for (std::size_t i = 0; i < row.size(); ++i)
            if (row[i].kind == op::SEND_F || row[i].kind == op::SEND_B) send_pos[detail::send_key(out, row[i])] = i;
    for (int r = 0; r < p.ranks; ++r) detail::order_receives_by_send(out, r, send_pos);
    return out;
}

} // namespace tpipe
