#pragma once
// A latency model as a simulator cost model: the planner's t(b, s, c) is forward + backward
// (+ transfer) of one unit on one stage; the simulator wants each pass separately. The split
// is explicit: forward takes `forward_share` of t (a third by default: backward is about twice
// the forward), a full backward the rest, and a split backward gives half of that to the
// input gradient (I) and half to the weight gradient (W). Transfers cost nothing here because
// t already includes them; pass `transfer_seconds` to model them separately instead.
// link_priced_costs does that for the analytic model: its t includes two messages on the link,
// which become transfers of their own (non-blocking sends in the simulator).
// stage_latency_costs prices each stage by its own model (plan/stage_latencies.hpp), the same
// split applied to each stage's t.
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/plan/stage_latencies.hpp"
#include "tpipe/schedule/action.hpp"

namespace tpipe {

namespace detail {
//! The share of a unit's forward + backward time `t` that pass `kind` takes.
inline double pass_seconds(op kind, double t, double forward_share)
{
    switch (kind) {
    case op::F: return forward_share * t;
    case op::B: return (1 - forward_share) * t;
    case op::I:
    case op::W: return (1 - forward_share) * t / 2;
    default: return 0;
    }
}
inline void require_forward_share(double share)
{
    require(share >= 0 && share <= 1, "latency costs: forward_share must lie in [0, 1], got " + std::to_string(share));
}
} // namespace detail

template <latency_model M>
struct latency_costs {
    M model;
    double forward_share = 1.0 / 3.0;
    double transfer_seconds = 0;

    latency_costs(M m, double forward = 1.0 / 3.0, double transfer = 0)
        : model(std::move(m)), forward_share(forward), transfer_seconds(transfer)
    {
        detail::require_forward_share(forward_share);
        detail::require(transfer_seconds >= 0, "latency costs: transfer_seconds must be >= 0");
    }

    double compute(op kind, int, const unit& u) const
    {
        const double t = detail::checked_time(model.seconds(u.rows(), u.tokens(), u.context()), u.rows(), u.tokens(),
                                              u.context());
        return detail::pass_seconds(kind, t, forward_share);
    }
    double transfer(op, int, int, const unit&) const { return transfer_seconds; }
};

//! Each stage priced by its own latency model: a pass of unit u on stage k takes its share of
//! t_k(u) (the split of latency_costs; transfers inside t unless `transfer_seconds` is given).
//! For programs of one stage per rank (stage k on rank k); a program with a stage that has no
//! model (more stages than models) is refused when the simulator asks for it.
template <latency_model M>
struct stage_latency_costs {
    slowest_stage_latency<M> models;
    double forward_share = 1.0 / 3.0;
    double transfer_seconds = 0;

    stage_latency_costs(slowest_stage_latency<M> m, double forward = 1.0 / 3.0, double transfer = 0)
        : models(std::move(m)), forward_share(forward), transfer_seconds(transfer)
    {
        detail::require_forward_share(forward_share);
        detail::require(transfer_seconds >= 0, "latency costs: transfer_seconds must be >= 0");
    }
    stage_latency_costs(std::vector<M> m, double forward = 1.0 / 3.0, double transfer = 0)
        : stage_latency_costs(slowest_stage_latency<M>(std::move(m)), forward, transfer)
    {
    }

    double compute(op kind, int stage, const unit& u) const
    {
        const double t = detail::checked_time(models.stage(stage).seconds(u.rows(), u.tokens(), u.context()),
                                              u.rows(), u.tokens(), u.context());
        return detail::pass_seconds(kind, t, forward_share);
    }
    double transfer(op, int, int, const unit&) const { return transfer_seconds; }
};

//! The analytic model with its link as a resource of its own: a pass gets its share of t
//! without the two messages t includes, and each message (activation forward, gradient
//! backward) costs `transfer_seconds(b, s)`.
struct link_priced_costs {
    analytic_latency model;
    double forward_share = 1.0 / 3.0;

    link_priced_costs(analytic_latency m, double forward = 1.0 / 3.0) : model(std::move(m)), forward_share(forward)
    {
        detail::require_forward_share(forward_share);
    }

    double compute(op kind, int, const unit& u) const
    {
        const double t = model.seconds(u.rows(), u.tokens(), u.context()) - 2 * model.transfer_seconds(u.rows(), u.tokens());
        return detail::pass_seconds(kind, t, forward_share);
    }
    double transfer(op, int, int, const unit& u) const { return model.transfer_seconds(u.rows(), u.tokens()); }
};

} // namespace tpipe
