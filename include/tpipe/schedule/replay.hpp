#pragma once
// Replays a program in order on every rank, the way a runtime would run it: a rank executes its
// actions one after another; a compute waits for its inputs; a send never blocks (eager: the
// transfer starts when the SEND is issued); a RECV only *posts* the receive and never blocks: the
// compute that consumes the payload waits for it to arrive (PyTorch's irecv-then-wait). A
// WAIT_SEND blocks until its send has arrived; UNSHARD and REDUCE_GRAD start asynchronous work
// that the stage's computes (UNSHARD) or WAIT_REDUCE_GRAD wait for. The same walk checks the
// dependency rules (validation, with zero durations) and computes a timeline (simulation, with
// a cost model). Everything is constexpr so that programs can be validated in a static_assert.
#include <string>
#include <vector>

#include "tpipe/schedule/program.hpp"

namespace tpipe {

enum class problem : unsigned char {
    none,
    bad_shape,       //!< ranks/stages/placement inconsistent
    bad_stage,       //!< an action names a stage that does not exist
    wrong_rank,      //!< an action runs on a rank that does not own its stage
    bad_unit,        //!< an action names a microbatch or slice outside the scheme
    duplicate,       //!< the same action twice
    out_of_order,    //!< a dependency on the same rank comes later (or never)
    bad_comm,        //!< a send/receive between stages on the same rank or past the ends
    deadlock,        //!< every unfinished rank waits for another
    missing_work,    //!< a unit is never run forward/backward on some stage
    unmatched_send,  //!< a send that no one receives
    bad_group,       //!< an OVERLAP_F_B header not followed by its computes
};

//! Where a rank is stuck: the action it is at and the one it waits for (on another rank).
struct wait_edge {
    int rank = -1;
    action at{};
    action waits_for{};
    int waits_on_rank = -1;
    friend constexpr bool operator==(const wait_edge&, const wait_edge&) = default;
};

//! The outcome of checking a program; `ok()` when nothing is wrong.
struct verdict {
    problem what = problem::none;
    int rank = -1;          //!< rank of the offending action
    int index = -1;         //!< its position in that rank's list
    action at{};            //!< the offending action
    action needs{};         //!< what it needed (dependency, partner action)
    std::vector<wait_edge> waits;  //!< for deadlocks: every stuck rank
    constexpr bool ok() const { return what == problem::none; }
};

//! The checks that need no replay: the program's shape (ranks, action lists, a placement on its
//! ranks), and that every action names a stage of it, runs on the rank that owns the stage and
//! names a unit of the scheme, and that every OVERLAP_F_B header is followed by its computes.
//! check() runs these first; a runner runs them even when told not to validate, as it indexes
//! its stages and units by them.
constexpr verdict check_structure(const program& p)
{
    auto fail = [](problem what, int r, int i, action at) { return verdict{what, r, i, at, {}, {}}; };
    if (p.ranks < 1 || static_cast<int>(p.actions.size()) != p.ranks || p.stage_rank.empty())
        return fail(problem::bad_shape, -1, -1, {});
    for (int rk : p.stage_rank)
        if (rk < 0 || rk >= p.ranks) return fail(problem::bad_shape, rk, -1, {});
    const int S = p.stages();
    for (int r = 0; r < p.ranks; ++r) {
        const auto& row = p.actions[r];
        for (std::size_t k = 0; k < row.size(); ++k) {
            const action& a = row[k];
            const int i = static_cast<int>(k);
            if (a.kind == op::OVERLAP_F_B) {  // a group header: followed by the computes it groups
                const int n = a.microbatch;
                bool ok = n >= 2 && k + static_cast<std::size_t>(n) < row.size();
                for (int g = 1; ok && g <= n; ++g) ok = is_compute(row[k + g].kind);
                if (!ok) return fail(problem::bad_group, r, i, a);
                continue;
            }
            if (a.stage < 0 || a.stage >= S) return fail(problem::bad_stage, r, i, a);
            if (p.stage_rank[a.stage] != r) return fail(problem::wrong_rank, r, i, a);
            if (!is_stage_level(a.kind) && !p.units.contains(a.microbatch, a.slice)) return fail(problem::bad_unit, r, i, a);
        }
    }
    return {};
}

namespace detail {

//! Durations and observer for a replay that only checks (all zero, records nothing).
struct zero_timing {
    constexpr double compute(const action&, const unit&) const { return 0; }
    constexpr double transfer(const action&, int, int, const unit&) const { return 0; }
    constexpr void record(int, const action&, double, double) const {}
    constexpr void live(int, int) const {}
};

template <class Timing>
class replayer {
public:
    constexpr replayer(const program& p, Timing& timing) : p_(p), t_(timing) {}

    constexpr verdict run()
    {
        if (auto v = check_structure(p_); !v.ok()) return v;
        const int S = p_.stages(), U = p_.units.units(), R = p_.ranks;
        comm_ = p_.lowered();
        const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(U);
        f_.assign(n, -1);
        bi_.assign(n, -1);
        w_.assign(n, -1);
        split_.assign(n, false);
        sent_f_.assign(n, -1);
        sent_b_.assign(n, -1);
        got_f_.assign(n, -1);
        got_b_.assign(n, -1);
        waited_f_.assign(n, false);
        waited_b_.assign(n, false);
        clock_.assign(R, 0);
        live_.assign(R, 0);
        grads_.assign(S, 0);
        last_grad_.assign(S, 0);
        gathered_.assign(S, -1);
        reduced_.assign(S, -1);
        reduce_waited_.assign(S, false);
        fsdp_.assign(S, false);
        for (const auto& row : p_.actions)
            for (const auto& a : row)
                if (a.kind == op::UNSHARD) fsdp_[a.stage] = true;
        std::vector<std::size_t> pc(R, 0);

        // Passes alternate between ranks ascending and descending: forward data flows down the
        // ranks and gradients up, so each direction clears its chain in one pass (one direction
        // only would take a pass per hop, and blow constexpr step limits on large programs).
        bool progress = true;
        for (bool down = true; progress; down = !down) {
            progress = false;
            for (int i = 0; i < R; ++i) {
                const int r = down ? i : R - 1 - i;
                const auto& row = p_.actions[r];
                while (pc[r] < row.size()) {
                    verdict v = step(r, static_cast<int>(pc[r]), row[pc[r]]);
                    if (v.what == problem::deadlock) break;  // blocked: try other ranks
                    if (!v.ok()) return v;
                    ++pc[r];
                    progress = true;
                }
            }
        }
        verdict stuck{problem::deadlock, -1, -1, {}, {}, {}};
        for (int r = 0; r < R; ++r)
            if (pc[r] < p_.actions[r].size()) {
                verdict v = step(r, static_cast<int>(pc[r]), p_.actions[r][pc[r]]);
                stuck.waits.push_back(wait_edge{r, p_.actions[r][pc[r]], v.needs, v.rank});
            }
        if (!stuck.waits.empty()) {
            stuck.rank = stuck.waits.front().rank;
            stuck.at = stuck.waits.front().at;
            stuck.needs = stuck.waits.front().waits_for;
            return stuck;
        }
        return check_complete();
    }

private:
    constexpr std::size_t key(int s, int u) const
    {
        return static_cast<std::size_t>(s) * static_cast<std::size_t>(p_.units.units()) + static_cast<std::size_t>(u);
    }
    static constexpr verdict fail(problem what, int r, int i, action at, action needs = {})
    {
        return verdict{what, r, i, at, needs, {}};
    }
    //! Blocked: reported with kind deadlock; rank holds the rank waited on.
    static constexpr verdict blocked(action needs, int on_rank) { return verdict{problem::deadlock, on_rank, -1, {}, needs, {}}; }

    constexpr verdict step(int r, int i, const action& a)
    {
        // check_structure: the stage exists, is this rank's, and the unit is the scheme's.
        if (a.kind == op::OVERLAP_F_B) return {};  // its computes follow and run in order
        if (is_stage_level(a.kind)) return stage_step(r, i, a);
        const int s = a.stage, mb = a.microbatch, sl = a.slice;
        const int u = p_.units.index(mb, sl);
        const std::size_t k = key(s, u);
        const unit un = p_.units.at(mb, sl);
        auto local = [&](double t) { return t >= 0; };
        double ready = clock_[r];
        auto after = [&](double t) { ready = ready < t ? t : ready; };
        if (is_compute(a.kind) && fsdp_[s]) {  // an FSDP stage computes only while gathered
            if (!local(gathered_[s])) return fail(problem::out_of_order, r, i, a, action{s, op::UNSHARD, 0, 0});
            after(gathered_[s]);
        }

        switch (a.kind) {
        case op::F: {
            if (local(f_[k])) return fail(problem::duplicate, r, i, a);
            if (sl > 0) {
                if (!local(f_[key(s, u - 1)])) return fail(problem::out_of_order, r, i, a, action{s, op::F, mb, sl - 1});
                after(f_[key(s, u - 1)]);
            }
            if (s > 0) {
                if (auto v = input(r, i, a, s - 1, u, op::F, op::RECV_F, f_, got_f_, sent_f_, ready); !v.ok()) return v;
            }
            const double start = ready, end = start + t_.compute(a, un);
            f_[k] = end;
            clock_[r] = end;
            t_.record(r, a, start, end);
            t_.live(r, ++live_[r]);
            return {};
        }
        case op::B:
        case op::I: {
            if (local(bi_[k])) return fail(problem::duplicate, r, i, a);
            if (!local(f_[k])) return fail(problem::out_of_order, r, i, a, action{s, op::F, mb, sl});
            after(f_[k]);
            if (sl + 1 < p_.units.slices(mb)) {
                if (!local(bi_[key(s, u + 1)]))
                    return fail(problem::out_of_order, r, i, a, action{s, a.kind, mb, sl + 1});
                after(bi_[key(s, u + 1)]);
            }
            if (s + 1 < p_.stages()) {
                if (auto v = input(r, i, a, s + 1, u, a.kind, op::RECV_B, bi_, got_b_, sent_b_, ready); !v.ok()) return v;
            }
            const double start = ready, end = start + t_.compute(a, un);
            bi_[k] = end;
            split_[k] = a.kind == op::I;
            clock_[r] = end;
            t_.record(r, a, start, end);
            if (a.kind == op::B) {
                t_.live(r, --live_[r]);
                gradient_done(s, end);
            }
            return {};
        }
        case op::W: {
            if (local(w_[k])) return fail(problem::duplicate, r, i, a);
            if (!local(bi_[k]) || !split_[k]) return fail(problem::out_of_order, r, i, a, action{s, op::I, mb, sl});
            after(bi_[k]);
            const double start = ready, end = start + t_.compute(a, un);
            w_[k] = end;
            clock_[r] = end;
            t_.record(r, a, start, end);
            t_.live(r, --live_[r]);
            gradient_done(s, end);
            return {};
        }
        case op::SEND_F:
        case op::SEND_B: {
            const bool fwd = a.kind == op::SEND_F;
            if (!adjacent_remote(r, s, fwd ? s + 1 : s - 1)) return fail(problem::bad_comm, r, i, a);
            auto& sent = fwd ? sent_f_ : sent_b_;
            if (sent[k] >= 0) return fail(problem::duplicate, r, i, a);
            const double produced = fwd ? f_[k] : bi_[k];
            if (!local(produced))
                return fail(problem::out_of_order, r, i, a, action{s, fwd ? op::F : op::B, mb, sl});
            after(produced);
            sent[k] = ready + t_.transfer(a, s, fwd ? s + 1 : s - 1, un);
            t_.record(r, a, ready, sent[k]);
            return {};
        }
        case op::WAIT_SEND_F:
        case op::WAIT_SEND_B: {
            const bool fwd = a.kind == op::WAIT_SEND_F;
            if (!adjacent_remote(r, s, fwd ? s + 1 : s - 1)) return fail(problem::bad_comm, r, i, a);
            auto& waited = fwd ? waited_f_ : waited_b_;
            if (waited[k]) return fail(problem::duplicate, r, i, a);
            const double arrival = (fwd ? sent_f_ : sent_b_)[k];
            if (!local(arrival)) return fail(problem::out_of_order, r, i, a, action{s, fwd ? op::SEND_F : op::SEND_B, mb, sl});
            after(arrival);
            waited[k] = true;
            t_.record(r, a, clock_[r], ready);
            clock_[r] = ready;  // a wait blocks its rank until the send has arrived
            return {};
        }
        case op::RECV_F:
        case op::RECV_B: {
            const bool fwd = a.kind == op::RECV_F;
            if (!adjacent_remote(r, s, fwd ? s - 1 : s + 1)) return fail(problem::bad_comm, r, i, a);
            auto& got = fwd ? got_f_ : got_b_;
            if (got[k] >= 0) return fail(problem::duplicate, r, i, a);
            got[k] = clock_[r];  // posted; the consuming compute waits for the payload
            return {};
        }
        default: break;
        }
        return fail(problem::bad_stage, r, i, a);
    }

    //! UNSHARD, RESHARD, REDUCE_GRAD, WAIT_REDUCE_GRAD: state of a whole stage.
    constexpr verdict stage_step(int r, int i, const action& a)
    {
        const int s = a.stage;
        const unit un = p_.units.at(0);
        const double now = clock_[r];
        switch (a.kind) {
        case op::UNSHARD:
            if (gathered_[s] >= 0) return fail(problem::duplicate, r, i, a);  // already gathered
            gathered_[s] = now + t_.compute(a, un);
            t_.record(r, a, now, gathered_[s]);
            return {};
        case op::RESHARD:
            if (gathered_[s] < 0) return fail(problem::out_of_order, r, i, a, action{s, op::UNSHARD, 0, 0});
            gathered_[s] = -1;
            t_.record(r, a, now, now + t_.compute(a, un));
            return {};
        case op::REDUCE_GRAD: {
            if (reduced_[s] >= 0) return fail(problem::duplicate, r, i, a);
            if (grads_[s] < p_.units.units()) return fail(problem::out_of_order, r, i, a, missing_gradient(s));
            const double start = now < last_grad_[s] ? last_grad_[s] : now;
            reduced_[s] = start + t_.compute(a, un);
            t_.record(r, a, start, reduced_[s]);
            return {};
        }
        case op::WAIT_REDUCE_GRAD: {
            if (reduce_waited_[s]) return fail(problem::duplicate, r, i, a);
            if (reduced_[s] < 0) return fail(problem::out_of_order, r, i, a, action{s, op::REDUCE_GRAD, 0, 0});
            reduce_waited_[s] = true;
            const double end = now < reduced_[s] ? reduced_[s] : now;
            t_.record(r, a, now, end);
            clock_[r] = end;
            return {};
        }
        default: return fail(problem::bad_stage, r, i, a);
        }
    }

    constexpr bool adjacent_remote(int r, int s, int peer) const
    {
        return peer >= 0 && peer < p_.stages() && p_.stage_rank[peer] != r && p_.stage_rank[s] == r;
    }

    //! A unit's weight gradient on stage s is complete (its B, or its W).
    constexpr void gradient_done(int s, double end)
    {
        ++grads_[s];
        if (last_grad_[s] < end) last_grad_[s] = end;
    }
    //! The first unit of stage s whose weight gradient is not complete.
    constexpr action missing_gradient(int s) const
    {
        for (int u = 0; u < p_.units.units(); ++u) {
            const unit un = p_.units.at(u);
            const std::size_t k = key(s, u);
            if (bi_[k] < 0) return action{s, op::B, un.microbatch, un.slice};
            if (split_[k] && w_[k] < 0) return action{s, op::W, un.microbatch, un.slice};
        }
        return action{s, op::B, 0, 0};
    }

    //! The input of a compute on stage s that comes from stage `from`: same rank (must be done),
    //! another rank through a posted receive whose payload it waits for (lowered), or directly
    //! (compute-only: the rank waits on the producer). Raises `ready` to when the input is there.
    constexpr verdict input(int r, int i, const action& a, int from, int u, op from_kind, op recv_kind,
                            const std::vector<double>& done, const std::vector<double>& posted,
                            const std::vector<double>& sent, double& ready)
    {
        const int s = a.stage;
        const int from_rank = p_.stage_rank[from];
        const op send_kind = from_kind == op::F ? op::SEND_F : op::SEND_B;
        double available = 0;
        if (from_rank == r) {
            if (done[key(from, u)] < 0)
                return fail(problem::out_of_order, r, i, a, action{from, from_kind, a.microbatch, a.slice});
            available = done[key(from, u)];
        } else if (comm_) {
            if (posted[key(s, u)] < 0)
                return fail(problem::out_of_order, r, i, a, action{s, recv_kind, a.microbatch, a.slice});
            if (sent[key(from, u)] < 0) return blocked(action{from, send_kind, a.microbatch, a.slice}, from_rank);
            available = sent[key(from, u)];
        } else {
            if (done[key(from, u)] < 0) return blocked(action{from, from_kind, a.microbatch, a.slice}, from_rank);
            const action send{from, send_kind, a.microbatch, a.slice};
            available = done[key(from, u)] + t_.transfer(send, from, s, p_.units.at(a.microbatch, a.slice));
        }
        if (ready < available) ready = available;
        return {};
    }

    constexpr verdict check_complete() const
    {
        const int S = p_.stages();
        for (int s = 0; s < S; ++s)
            for (int u = 0; u < p_.units.units(); ++u) {
                const unit un = p_.units.at(u);
                const std::size_t k = key(s, u);
                const int r = p_.stage_rank[s];
                if (f_[k] < 0) return fail(problem::missing_work, r, -1, action{s, op::F, un.microbatch, un.slice});
                if (bi_[k] < 0) return fail(problem::missing_work, r, -1, action{s, op::B, un.microbatch, un.slice});
                if (split_[k] && w_[k] < 0)
                    return fail(problem::missing_work, r, -1, action{s, op::W, un.microbatch, un.slice});
                if (sent_f_[k] >= 0 && got_f_[key(s + 1, u)] < 0)
                    return fail(problem::unmatched_send, r, -1, action{s, op::SEND_F, un.microbatch, un.slice},
                                action{s + 1, op::RECV_F, un.microbatch, un.slice});
                if (sent_b_[k] >= 0 && got_b_[key(s - 1, u)] < 0)
                    return fail(problem::unmatched_send, r, -1, action{s, op::SEND_B, un.microbatch, un.slice},
                                action{s - 1, op::RECV_B, un.microbatch, un.slice});
            }
        return {};
    }

    const program& p_;
    Timing& t_;
    bool comm_ = false;
    // Per (stage, unit): when each compute ended, when each send arrives, when each receive was posted.
    std::vector<double> f_, bi_, w_, sent_f_, sent_b_, got_f_, got_b_, clock_;
    std::vector<bool> split_, waited_f_, waited_b_;
    std::vector<int> live_;
    // Per stage: weight gradients complete (count, last end), parameters gathered since (-1: not
    // gathered), gradient reduction done at (-1: not started), whether the stage uses FSDP.
    std::vector<int> grads_;
    std::vector<double> last_grad_, gathered_, reduced_;
    std::vector<bool> reduce_waited_, fsdp_;
};

} // namespace detail

//! Checks every rule of a program without throwing (usable in a constant expression).
constexpr verdict check(const program& p)
{
    detail::zero_timing t;
    return detail::replayer<detail::zero_timing>(p, t).run();
}

} // namespace tpipe
