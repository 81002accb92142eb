#pragma once
// Validation: a program obeys the dependency rules (F before its B; B/I of stage s after B/I of
// stage s+1; W after I; token order; every unit exactly once per stage; a compute after the
// receive it consumes is posted; sends match receives; WAIT_SEND after its SEND; REDUCE_GRAD
// after the stage's last gradient; an FSDP stage computes between UNSHARD and RESHARD) and
// cannot deadlock. A refusal names the rank, the action and what it waits for.
#include <algorithm>
#include <string>

#include "tpipe/schedule/replay.hpp"

namespace tpipe {

//! True when the program passes every check; usable in static_assert.
constexpr bool valid(const program& p) { return check(p).ok(); }

namespace rule_broken {
// Deliberately not constexpr: reaching one in a constant expression stops compilation, and the
// compiler's message names it ("call to non-'constexpr' function ...::a_rank_deadlocks()").
inline void the_shape_is_inconsistent() {}
inline void an_action_names_a_stage_that_does_not_exist() {}
inline void an_action_runs_on_a_rank_that_does_not_own_its_stage() {}
inline void an_action_names_a_unit_outside_the_scheme() {}
inline void an_action_runs_twice() {}
inline void an_action_comes_before_what_it_needs_on_its_rank() {}
inline void a_send_or_receive_does_not_connect_adjacent_stages_on_different_ranks() {}
inline void the_ranks_deadlock() {}
inline void a_unit_never_runs_forward_and_backward_on_some_stage() {}
inline void a_send_has_no_matching_receive() {}
inline void an_overlap_group_is_not_followed_by_its_computes() {}
} // namespace rule_broken

//! `static_assert(tpipe::must_be_valid(p))`: true for a valid program; for an invalid one the
//! compilation fails with a message naming the broken rule. (A compile-time message cannot
//! carry the rank and action; `validate(p)` at run time says those.)
constexpr bool must_be_valid(const program& p)
{
    switch (check(p).what) {
    case problem::none: return true;
    case problem::bad_shape: rule_broken::the_shape_is_inconsistent(); break;
    case problem::bad_stage: rule_broken::an_action_names_a_stage_that_does_not_exist(); break;
    case problem::wrong_rank: rule_broken::an_action_runs_on_a_rank_that_does_not_own_its_stage(); break;
    case problem::bad_unit: rule_broken::an_action_names_a_unit_outside_the_scheme(); break;
    case problem::duplicate: rule_broken::an_action_runs_twice(); break;
    case problem::out_of_order: rule_broken::an_action_comes_before_what_it_needs_on_its_rank(); break;
    case problem::bad_comm: rule_broken::a_send_or_receive_does_not_connect_adjacent_stages_on_different_ranks(); break;
    case problem::deadlock: rule_broken::the_ranks_deadlock(); break;
    case problem::missing_work: rule_broken::a_unit_never_runs_forward_and_backward_on_some_stage(); break;
    case problem::unmatched_send: rule_broken::a_send_has_no_matching_receive(); break;
    case problem::bad_group: rule_broken::an_overlap_group_is_not_followed_by_its_computes(); break;
    }
    return false;
}

namespace detail {
inline bool has_action(const program& p, int rank, const action& a)
{
    if (rank < 0 || rank >= static_cast<int>(p.actions.size())) return false;
    const auto& row = p.actions[rank];
    return std::find(row.begin(), row.end(), a) != row.end();
}
} // namespace detail

//! A sentence that says what is wrong with the program and where.
inline std::string explain(const program& p, const verdict& v)
{
    auto where = [&] {
        std::string w = "rank " + std::to_string(v.rank);
        if (v.index >= 0) w += ", action #" + std::to_string(v.index);
        return w + " '" + to_string(v.at) + "'";
    };
    switch (v.what) {
    case problem::none: return "the program is valid";
    case problem::bad_shape:
        return "the program's shape is inconsistent: it has " + std::to_string(p.ranks) + " ranks, " +
               std::to_string(p.actions.size()) + " action lists and a placement of " +
               std::to_string(p.stage_rank.size()) + " stages; every stage must be placed on a rank in [0, " +
               std::to_string(p.ranks) + ")";
    case problem::bad_stage:
        return where() + ": stage " + std::to_string(v.at.stage) + " does not exist (the program has " +
               std::to_string(p.stages()) + " stages)";
    case problem::wrong_rank:
        return where() + ": stage " + std::to_string(v.at.stage) + " is placed on rank " +
               std::to_string(p.stage_rank[v.at.stage]) + ", so only that rank may run it";
    case problem::bad_unit:
        return where() + ": microbatch " + std::to_string(v.at.microbatch) + " slice " + std::to_string(v.at.slice) +
               " is not a unit of this iteration (" + std::to_string(p.units.microbatches()) + " microbatches)";
    case problem::duplicate: return where() + ": this action already ran; each runs exactly once";
    case problem::out_of_order:
        if (v.needs.kind == op::UNSHARD && v.at.kind != op::RESHARD)
            return where() + ": stage " + std::to_string(v.at.stage) + " uses FSDP and its parameters are not "
                   "gathered here; needs '" + to_string(v.needs) + "' earlier on rank " + std::to_string(v.rank) +
                   " with no RESHARD in between";
        return where() + ": needs '" + to_string(v.needs) + "' first, which is not earlier on rank " +
               std::to_string(v.rank);
    case problem::bad_comm:
        return where() + ": a send or receive must connect adjacent stages placed on different ranks";
    case problem::deadlock: {
        std::string m = "deadlock: no rank can make progress;";
        for (const auto& w : v.waits) {
            m += " rank " + std::to_string(w.rank) + " at '" + to_string(w.at) + "' waits for '" +
                 to_string(w.waits_for) + "' on rank " + std::to_string(w.waits_on_rank);
            m += detail::has_action(p, w.waits_on_rank, w.waits_for) ? " (not reached);" : " (which it never runs);";
        }
        m.pop_back();
        return m;
    }
    case problem::missing_work:
        return "rank " + std::to_string(v.rank) + " never runs '" + to_string(v.at) +
               "'; every unit must run forward and backward (B, or I and W) exactly once on every stage";
    case problem::bad_group:
        return where() + ": an OVERLAP_F_B header must be followed by the " + std::to_string(v.at.microbatch) +
               " computes (F, B, I, W; at least two) it groups";
    case problem::unmatched_send:
        return "rank " + std::to_string(v.rank) + ": '" + to_string(v.at) + "' has no matching '" + to_string(v.needs) +
               "' on rank " + std::to_string(p.stage_rank[v.needs.stage]);
    }
    return "unknown problem";
}

//! Throws tpipe::invalid_program explaining the first broken rule, or returns.
inline void validate(const program& p)
{
    if (auto v = check(p); !v.ok()) throw invalid_program(explain(p, v));
}

//! validate() for the rules of check_structure only (shape, stages, ranks, units, groups): what a
//! program that is not meant to be whole (forward only, a benchmark's) must still obey.
inline void validate_structure(const program& p)
{
    if (auto v = check_structure(p); !v.ok()) throw invalid_program(explain(p, v));
}

} // namespace tpipe
