#pragma once
// The runner's compiled program: for each rank this process runs, its steps (the actions bound to
// their stages' boundaries, each compute told which arrival it awaits and which backward is the
// stage's last), the receives it posts when it starts and the sending channels it drains when it
// ends; and the fingerprint every process of a run must agree on.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/detail/boundary.hpp"
#include "tpipe/exec/detail/steps.hpp"
#include "tpipe/exec/fingerprint.hpp"
#include "tpipe/schedule/action.hpp"
#include "tpipe/schedule/program.hpp"

namespace tpipe::detail {

struct post_of {  //!< a receive to post when the rank starts
    boundary_base* b;
    bool forward;
    int u;
};
struct drain_of {  //!< a remote sending channel to drain when the rank ends
    boundary_base* b;
    bool forward;
};

//! Per rank (indexed by rank; empty for ranks other processes run).
struct rank_plan {
    std::vector<std::vector<step>> steps;
    std::vector<std::vector<post_of>> posts;
    std::vector<std::vector<drain_of>> drains;
    //! SENDs minus RECVs over every rank: a program run whole leaves this many payloads in its
    //! channels (0 for a valid program; a forward-only benchmark's may not be).
    std::int64_t unmatched_sends = 0;
};

//! Compiles the lowered `prog`, whose structure was checked (tpipe::check_structure), over the
//! stages' `bindings` (`units` units; `runs(r)`: this process runs rank r). One pass per rank: a
//! RECV of a rank run here posts its receive when the rank starts (if the sender is in another
//! process), and the compute that consumes the payload awaits its arrival; the RECV's own step
//! only marks the program's place (the trace, the progress a stall report names).
template <class Runs>
rank_plan compile_ranks(const program& prog, const std::vector<stage_binding>& bindings, int units, Runs&& runs)
{
    rank_plan plan;
    plan.steps.assign(static_cast<std::size_t>(prog.ranks), {});
    plan.posts.assign(static_cast<std::size_t>(prog.ranks), {});
    plan.drains.assign(static_cast<std::size_t>(prog.ranks), {});
    std::vector<char> received;  // per (stage, unit, direction): a RECV of this rank came before
    auto posted = [&](int stage, int u, bool fwd) -> char& {
        return received[(static_cast<std::size_t>(stage) * static_cast<std::size_t>(units) + static_cast<std::size_t>(u)) * 2 +
                        (fwd ? 0 : 1)];
    };
    for (int r = 0; r < prog.ranks; ++r) {
        for (const action& a : prog.actions[r]) {  // sends and receives to match, for every rank
            if (a.kind == op::SEND_F || a.kind == op::SEND_B) ++plan.unmatched_sends;
            if (a.kind == op::RECV_F || a.kind == op::RECV_B) --plan.unmatched_sends;
        }
        if (!runs(r)) continue;
        received.assign(bindings.size() * static_cast<std::size_t>(units) * 2, 0);
        auto& steps = plan.steps[r];
        for (const action& a : prog.actions[r]) {
            if (a.kind == op::OVERLAP_F_B) {  // a group header: its computes follow and run in order
                steps.push_back(step{.kind = op::OVERLAP_F_B});
                continue;
            }
            step st = compile_step(a, bindings[a.stage], prog.units.index(a.microbatch, a.slice));
            if (st.kind == op::RECV_F || st.kind == op::RECV_B) {
                posted(a.stage, st.u, st.forward) = 1;
                if (st.waits_on->remote(st.forward)) plan.posts[r].push_back({st.waits_on, st.forward, st.u});
                st.waits_on = nullptr;  // the consuming compute awaits it
            } else if (st.kind == op::F && posted(a.stage, st.u, true)) {
                st.waits_on = bindings[a.stage].in;
                st.forward = true;
            } else if ((st.kind == op::B || st.kind == op::I) && posted(a.stage, st.u, false)) {
                st.waits_on = bindings[a.stage].out;
                st.forward = false;
            } else if (st.kind == op::SEND_F || st.kind == op::SEND_B) {
                const bool fwd = st.kind == op::SEND_F;
                boundary_base* b = fwd ? bindings[a.stage].out : bindings[a.stage].in;
                const bool known = std::any_of(plan.drains[r].begin(), plan.drains[r].end(),
                                               [&](const drain_of& d) { return d.b == b && d.forward == fwd; });
                if (b->remote(fwd) && !known) plan.drains[r].push_back({b, fwd});
            }
            steps.push_back(st);
        }
        // The last backward action (B, I or W) of each stage on its rank starts the stage's
        // backward_hook work.
        std::vector<bool> seen(bindings.size(), false);
        for (std::size_t i = steps.size(); i-- > 0;) {
            const int s = prog.actions[r][i].stage;
            if ((steps[i].kind == op::B || steps[i].kind == op::I || steps[i].kind == op::W) && !seen[s]) {
                steps[i].last_backward = true;
                seen[s] = true;
            }
        }
    }
    return plan;
}

//! Every unit's rows and tokens, in index order, after an FNV-1a hash of them (so that a
//! disagreement's quote, cut at 80 characters, still differs): "<hash>: [0,8)x[0,32) ...".
//! The count alone would let processes with other batches or other cuts of the same number of
//! units exchange payloads of other shapes.
inline std::string unit_shapes(const scheme& units)
{
    std::string list;
    for (int i = 0; i < units.units(); ++i) {
        const unit u = units.at(i);
        list += (i ? " [" : "[") + std::to_string(u.row_begin) + "," + std::to_string(u.row_end) + ")x[" +
                std::to_string(u.token_begin) + "," + std::to_string(u.token_end) + ")";
    }
    std::uint64_t h = 1469598103934665603ull;
    for (char c : list) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    static constexpr char hex[] = "0123456789abcdef";
    std::string out(16, '0');
    for (int k = 15; k >= 0; --k, h >>= 4) out[static_cast<std::size_t>(k)] = hex[h & 15];
    return out + ": " + list;
}

//! What every process must agree on before the first iteration: the program's actions, its
//! stage placement, the stage count, ranks, units (every unit's rows and tokens) and the stages'
//! payload types.
inline std::string program_fingerprint(const program& prog, std::size_t stages, int units,
                                       const std::string& payload_names)
{
    std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the program's actions
    for (const auto& row : prog.actions)
        for (const action& a : row)
            for (char c : to_string(a) + ",") h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    std::string placement;
    for (int s : prog.stage_rank) placement += std::to_string(s) + ",";
    return tpipe::fingerprint()
        .add("stages", stages)
        .add("ranks", prog.ranks)
        .add("units", units)
        .add("unit rows x tokens", unit_shapes(prog.units))
        .add("stage placement", placement)
        .add("program hash", h)
        .add("payload types", payload_names)
        .text();
}

} // namespace tpipe::detail
