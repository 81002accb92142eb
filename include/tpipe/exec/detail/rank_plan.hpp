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
};

//! Compiles the lowered `prog` over the stages' `bindings` (`units` units; `runs(r)`: this
//! process runs rank r; `local_ranks`: those ranks). Throws tpipe::invalid_program for an action
//! that names a stage outside the pipeline, a stage on another rank or a unit outside the scheme.
template <class Runs>
rank_plan compile_ranks(const program& prog, const std::vector<stage_binding>& bindings, int units,
                        const std::vector<int>& local_ranks, Runs&& runs)
{
    rank_plan plan;
    plan.steps.assign(static_cast<std::size_t>(prog.ranks), {});
    plan.posts.assign(static_cast<std::size_t>(prog.ranks), {});
    plan.drains.assign(static_cast<std::size_t>(prog.ranks), {});
    const int stages = static_cast<int>(bindings.size());
    for (int r = 0; r < prog.ranks; ++r)
        for (const action& a : prog.actions[r]) {
            if (a.kind == op::OVERLAP_F_B) {  // a group header: its computes follow and run in order
                if (runs(r)) plan.steps[r].push_back(step{.kind = op::OVERLAP_F_B});
                continue;
            }
            if (a.stage < 0 || a.stage >= stages)
                throw invalid_program("action '" + to_string(a) + "' on rank " + std::to_string(r) +
                                      " names a stage outside [0, " + std::to_string(stages) + ")");
            if (prog.stage_rank[a.stage] != r)
                throw invalid_program("action '" + to_string(a) + "' runs on rank " + std::to_string(r) +
                                      " but stage " + std::to_string(a.stage) + " is placed on rank " +
                                      std::to_string(prog.stage_rank[a.stage]));
            if (!prog.units.contains(a.microbatch, a.slice))
                throw invalid_program("action '" + to_string(a) + "' names a unit that is not in the scheme");
            const step st =
                compile_step(a, bindings[a.stage], prog.units.index(a.microbatch, a.slice));
            if (!runs(r)) continue;
            if (st.waits_on && st.waits_on->remote(st.forward)) plan.posts[r].push_back({st.waits_on, st.forward, st.u});
            if (a.kind == op::SEND_F || a.kind == op::SEND_B) {
                const bool fwd = a.kind == op::SEND_F;
                boundary_base* b = fwd ? bindings[a.stage].out : bindings[a.stage].in;
                const bool known = std::any_of(plan.drains[r].begin(), plan.drains[r].end(),
                                               [&](const drain_of& d) { return d.b == b && d.forward == fwd; });
                if (b->remote(fwd) && !known) plan.drains[r].push_back({b, fwd});
            }
            plan.steps[r].push_back(st);
        }
    // A receive only posts (tpipe/schedule/action.hpp): the compute that consumes the payload
    // waits for it. Each F (B, I) whose input (output gradient) this rank received earlier
    // in the program awaits its arrival first.
    for (int r : local_ranks) {
        std::vector<char> received(bindings.size() * static_cast<std::size_t>(units) * 2, 0);
        auto slot = [&](int stage, int u, bool fwd) -> char& {
            return received[(static_cast<std::size_t>(stage) * static_cast<std::size_t>(units) +
                             static_cast<std::size_t>(u)) * 2 + (fwd ? 0 : 1)];
        };
        for (std::size_t i = 0; i < plan.steps[r].size(); ++i) {
            step& st = plan.steps[r][i];
            const int stage = prog.actions[r][i].stage;
            if (st.kind == op::RECV_F || st.kind == op::RECV_B) {
                slot(stage, st.u, st.kind == op::RECV_F) = 1;
            } else if (st.kind == op::F && slot(stage, st.u, true)) {
                st.waits_on = bindings[stage].in;
                st.forward = true;
            } else if ((st.kind == op::B || st.kind == op::I) && slot(stage, st.u, false)) {
                st.waits_on = bindings[stage].out;
                st.forward = false;
            }
        }
    }
    // The last backward action (B, I or W) of each stage on its rank starts the stage's
    // backward_hook work.
    for (int r : local_ranks) {
        std::vector<bool> seen(bindings.size(), false);
        for (std::size_t i = plan.steps[r].size(); i-- > 0;) {
            step& st = plan.steps[r][i];
            const int s = prog.actions[r][i].stage;
            if ((st.kind == op::B || st.kind == op::I || st.kind == op::W) && !seen[s]) {
                st.last_backward = true;
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
