#pragma once
// CSV form of a program, as PyTorch's pipelining reads and writes it: no header, row r lists
// rank r's actions in order, comma-separated; an empty cell is an idle slot (skipped); CRLF or
// LF line ends. Works for compute-only and lowered programs. Reading accepts both dialects —
// PyTorch's, and tpipe's, which adds the token-slice field (`0F2.1`) — and infers the
// stage->rank placement and the units (microbatches, slices) from the actions.
//
// `to_csv` writes tpipe's dialect. `to_pytorch_csv` writes what PyTorch 2.15 accepts: it refuses
// token-sliced programs (PyTorch has no slices) and completes a lowered program the way
// PyTorch's own lowering does — a WAIT_SEND for every send, and REDUCE_GRAD + WAIT_REDUCE_GRAD
// after each stage's last gradient, where PyTorch scales the gradients by 1/M — so that it runs
// there with the gradients PyTorch computes for its own schedules. It refuses a lowered program
// whose receives from a peer are not posted in that peer's send order (PyTorch would swap them).
#include <algorithm>
#include <string>
#include <string_view>

#include "tpipe/schedule/program.hpp"

namespace tpipe {

namespace detail {
//! Rank r's list as cells, an OVERLAP_F_B group as one `(a;b)OVERLAP_F_B` cell.
inline void write_row(std::string& out, const std::vector<action>& row, std::string_view eol)
{
    for (std::size_t i = 0; i < row.size(); ++i) {
        if (i) out += ',';
        if (row[i].kind == op::OVERLAP_F_B) {
            const auto n = static_cast<std::size_t>(row[i].microbatch);
            out += '(';
            for (std::size_t k = 1; k <= n && i + k < row.size(); ++k) {
                if (k > 1) out += ';';
                out += to_string(row[i + k]);
            }
            out += ')';
            out += name(op::OVERLAP_F_B);
            i += n;
        } else {
            out += to_string(row[i]);
        }
    }
    out += eol;
}
} // namespace detail

//! tpipe's dialect (LF line ends, token slices as `.k`).
inline std::string to_csv(const program& p)
{
    std::string out;
    for (const auto& row : p.actions) detail::write_row(out, row, "\n");
    return out;
}

//! Parses a program from CSV, PyTorch's or tpipe's dialect. Units get one row and one token
//! each, since the CSV does not carry their extents.
inline program from_csv(std::string_view text)
{
    program p;
    p.actions.clear();
    std::vector<int> placement;
    std::vector<int> slices;  // per microbatch: highest slice + 1
    // The bytes that can spell actions (not separators, blanks or line ends): a valid program names
    // every index below their count, so padding (40 MB of newlines) does not raise the bound.
    std::size_t spelled = 0;
    for (char ch : text) spelled += ch != '\n' && ch != '\r' && ch != ' ' && ch != '\t' && ch != ',';
    std::size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const int rank = static_cast<int>(p.actions.size());
        auto& row = p.actions.emplace_back();
        std::size_t c = 0;
        while (c <= line.size()) {
            std::size_t comma = line.find(',', c);
            if (comma == std::string_view::npos) comma = line.size();
            std::string_view cell = line.substr(c, comma - c);
            while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
            while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
            c = comma + 1;
            if (cell.empty()) continue;
            std::vector<action> cell_actions;
            try {
                cell_actions = parse_cell(cell);
            } catch (const parse_error& e) {
                throw parse_error("CSV line " + std::to_string(line_no) + ": " + e.what());
            }
            for (const action& a : cell_actions) {
                row.push_back(a);
                if (a.kind == op::OVERLAP_F_B) continue;
                // A valid program names every stage 0..S-1 and microbatch 0..M-1, each in at least
                // two bytes of text: a larger index cannot be valid, and would size tables by it.
                if (static_cast<std::size_t>(a.stage) >= spelled || static_cast<std::size_t>(a.microbatch) >= spelled ||
                    static_cast<std::size_t>(a.slice) >= spelled)
                    throw parse_error("CSV line " + std::to_string(line_no) + ": action '" + to_string(a) +
                                      "' has an index larger than the " + std::to_string(spelled) +
                                      " bytes of actions in the file; a valid program names every stage, microbatch "
                                      "and slice below it");
                if (static_cast<int>(placement.size()) <= a.stage) placement.resize(a.stage + 1, -1);
                if (is_compute(a.kind)) {
                    if (placement[a.stage] != -1 && placement[a.stage] != rank)
                        throw parse_error("CSV line " + std::to_string(line_no) + ": stage " +
                                          std::to_string(a.stage) + " appears on rank " +
                                          std::to_string(placement[a.stage]) + " and on rank " + std::to_string(rank) +
                                          "; a stage lives on exactly one rank");
                    placement[a.stage] = rank;
                }
                if (is_stage_level(a.kind)) continue;
                if (static_cast<int>(slices.size()) <= a.microbatch) slices.resize(a.microbatch + 1, 0);
                slices[a.microbatch] = std::max(slices[a.microbatch], a.slice + 1);
            }
        }
        if (row.empty()) {
            // Line r is rank r: a line without actions (blank, or idle cells only) would be a rank
            // with none. Trailing blank lines are end-of-file padding; one between ranks is refused.
            p.actions.pop_back();
            if (line.find_first_not_of(" \t") == std::string_view::npos &&
                text.find_first_not_of(" \t\r\n", std::min(pos, text.size())) == std::string_view::npos)
                break;
            throw parse_error("CSV line " + std::to_string(line_no) + " lists no action; line r lists rank r's actions, "
                              "so it would be a rank with none (remove it)");
        }
    }
    if (p.actions.empty()) throw parse_error("CSV: no ranks (the file is empty)");
    p.ranks = static_cast<int>(p.actions.size());
    for (std::size_t s = 0; s < placement.size(); ++s)
        if (placement[s] == -1)
            throw parse_error("CSV: stage " + std::to_string(s) + " has no compute action, so its rank is unknown");
    if (placement.empty() || slices.empty()) throw parse_error("CSV: no actions");
    p.stage_rank = placement;
    std::vector<scheme::microbatch> mbs;
    for (std::size_t m = 0; m < slices.size(); ++m) {
        if (slices[m] == 0) slices[m] = 1;  // a microbatch never mentioned: validation reports it missing
        scheme::microbatch mb{static_cast<std::int64_t>(m), static_cast<std::int64_t>(m) + 1, {}};
        for (int s = 0; s <= slices[m]; ++s) mb.cuts.push_back(s);
        mbs.push_back(std::move(mb));
    }
    p.units = scheme(std::move(mbs));
    return p;
}

namespace detail {
//! Adds what PyTorch's lowering adds after `_add_send_recv`, where the program lacks it:
//! REDUCE_GRAD + WAIT_REDUCE_GRAD after the sends that follow a stage's M-th gradient (B or W),
//! and a WAIT_SEND_F right after the local backward of the same unit (which proves the peer
//! consumed it), every other WAIT_SEND at the end of the rank's list.
inline program complete_for_pytorch(const program& p)
{
    program out = p;
    const int S = p.stages(), M = p.units.microbatches();
    std::vector<bool> reduces(S, false);
    std::vector<std::vector<bool>> waits(2, std::vector<bool>(static_cast<std::size_t>(S) * M, false));
    for (const auto& row : p.actions)
        for (const auto& a : row) {
            if (a.kind == op::REDUCE_GRAD) reduces[a.stage] = true;
            if (a.kind == op::WAIT_SEND_F || a.kind == op::WAIT_SEND_B)
                waits[a.kind == op::WAIT_SEND_B][static_cast<std::size_t>(a.stage) * M + a.microbatch] = true;
        }
    for (int r = 0; r < p.ranks; ++r) {
        const auto& in = p.actions[r];
        auto& row = out.actions[r];
        row.clear();
        std::vector<int> grads(S, 0);
        std::vector<action> pending;  // sends still owed a wait, in issue order
        std::vector<int> reduce_after;  // stages whose last gradient ran, reduced after the sends that follow
        auto owed = [&](const action& send) {
            return !waits[send.kind == op::SEND_B][static_cast<std::size_t>(send.stage) * M + send.microbatch];
        };
        auto flush_reduce = [&] {
            for (int s : reduce_after) {
                row.push_back({s, op::REDUCE_GRAD, 0, 0});
                row.push_back({s, op::WAIT_REDUCE_GRAD, 0, 0});
            }
            reduce_after.clear();
        };
        for (std::size_t i = 0; i < in.size(); ++i) {
            const bool is_send = in[i].kind == op::SEND_F || in[i].kind == op::SEND_B;
            if (!is_send) flush_reduce();
            const std::size_t n = in[i].kind == op::OVERLAP_F_B ? static_cast<std::size_t>(in[i].microbatch) + 1 : 1;
            for (std::size_t k = i; k < i + n && k < in.size(); ++k) row.push_back(in[k]);
            if (is_send && owed(in[i])) pending.push_back(in[i]);
            for (std::size_t k = i; k < i + n && k < in.size(); ++k) {
                const action& a = in[k];
                if (a.kind == op::B || a.kind == op::I) {
                    const action send{a.stage, op::SEND_F, a.microbatch, 0};
                    if (auto it = std::find(pending.begin(), pending.end(), send); it != pending.end()) {
                        row.push_back({a.stage, op::WAIT_SEND_F, a.microbatch, 0});
                        pending.erase(it);
                    }
                }
                if ((a.kind == op::B || a.kind == op::W) && ++grads[a.stage] == M && !reduces[a.stage])
                    reduce_after.push_back(a.stage);
            }
            i += n - 1;
        }
        flush_reduce();
        for (const action& send : pending)
            row.push_back({send.stage, send.kind == op::SEND_F ? op::WAIT_SEND_F : op::WAIT_SEND_B, send.microbatch, 0});
    }
    return out;
}
} // namespace detail

namespace detail {
//! Empty when every rank posts the receives from each peer in the order that peer sends them
//! (PyTorch matches the messages between two ranks in posting order); else the first receive
//! out of that order, as a sentence.
inline std::string receive_order_problem(const program& p)
{
    for (int r = 0; r < p.ranks; ++r)
        for (int q = 0; q < p.ranks; ++q) {
            if (q == r) continue;
            std::vector<action> sends, recvs, sent;  // q -> r, as the receives that match them; the sends
            for (const auto& a : p.actions[q])
                if ((a.kind == op::SEND_F && a.stage + 1 < p.stages() && p.stage_rank[a.stage + 1] == r) ||
                    (a.kind == op::SEND_B && a.stage > 0 && p.stage_rank[a.stage - 1] == r)) {
                    sends.push_back(a.kind == op::SEND_F ? action{a.stage + 1, op::RECV_F, a.microbatch, a.slice}
                                                         : action{a.stage - 1, op::RECV_B, a.microbatch, a.slice});
                    sent.push_back(a);
                }
            for (const auto& a : p.actions[r])
                if ((a.kind == op::RECV_F && a.stage > 0 && p.stage_rank[a.stage - 1] == q) ||
                    (a.kind == op::RECV_B && a.stage + 1 < p.stages() && p.stage_rank[a.stage + 1] == q))
                    recvs.push_back(a);
            for (std::size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k)
                if (sends[k] != recvs[k])
                    return "rank " + std::to_string(r) + " posts '" + to_string(recvs[k]) + "' where rank " +
                           std::to_string(q) + "'s next message to it is '" + to_string(sent[k]) + "' (for '" +
                           to_string(sends[k]) + "')";
        }
    return {};
}
} // namespace detail

//! Whether `target` can run the lowered program `p` as it stands. tpipe's runtime matches every
//! payload by its unit (tagged channels: local, MPI, NCCL, CUDA peer), so any receive order that
//! validates runs; PyTorch's batched P2P matches the messages between two ranks in posting order,
//! so there each rank must post the receives from a peer in that peer's send order. Empty when it
//! can; else the sentence, naming the receive and the send it would be paired with.
inline std::string pytorch_order_problem(const program& p)
{
    if (!p.lowered()) return {};
    const std::string why = detail::receive_order_problem(p);
    return why.empty() ? why
                       : why + "; PyTorch matches the messages between two ranks in the order they are posted, so "
                               "the payloads would be swapped. Post each rank's receives from a peer in that "
                               "peer's send order (tpipe::lower does)";
}

//! PyTorch 2.15's dialect (CRLF line ends, as its csv.writer writes them). A lowered program is
//! completed with the WAIT_SEND and REDUCE_GRAD actions PyTorch requires (see above); a
//! compute-only one is written as it is, for PyTorch's `_load_csv(format="compute_only")`.
//! Refuses a token-sliced program: PyTorch would read `0F0.1` as `0F0`.
inline std::string to_pytorch_csv(const program& p)
{
    if (p.sliced())
        throw invalid_argument("to_pytorch_csv: the program runs token slices (e.g. microbatch " + [&] {
            int m = 0;
            while (p.units.slices(m) < 2) ++m;
            return std::to_string(m) + " has " + std::to_string(p.units.slices(m));
        }() + "), which PyTorch's pipelining cannot express; export a program over whole microbatches "
              "(slices = 1), or keep tpipe's dialect (to_csv)");
    if (const std::string why = pytorch_order_problem(p); !why.empty()) throw invalid_argument("to_pytorch_csv: " + why);
    const program full = p.lowered() ? detail::complete_for_pytorch(p) : p;
    std::string out;
    for (const auto& row : full.actions) detail::write_row(out, row, "\r\n");
    return out;
}

} // namespace tpipe
