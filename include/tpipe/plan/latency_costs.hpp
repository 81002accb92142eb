#pragma once
// A latency model as a simulator cost model: the planner's t(b, s, c) is forward + backward
// (+ transfer) of one unit on one stage; the simulator wants each pass separately. The split
// is explicit: forward takes `forward_share` of t (a third by default: backward is about twice
// the forward), a full backward the rest, and a split backward gives half of that to the
// input gradient (I) and half to the weight gradient (W). Transfers cost nothing here because
// t already includes them; pass `transfer_seconds` to model them separately instead.
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/schedule/action.hpp"

namespace tpipe {

template <latency_model M>
struct latency_costs {
    M model;
    double forward_share = 1.0 / 3.0;
    double transfer_seconds = 0;

    latency_costs(M m, double forward = 1.0 / 3.0, double transfer = 0)
        : model(std::move(m)), forward_share(forward), transfer_seconds(transfer)
    {
        detail::require(forward_share >= 0 && forward_share <= 1,
                        "latency costs: forward_share must lie in [0, 1], got " + std::to_string(forward_share));
        detail::require(transfer_seconds >= 0, "latency costs: transfer_seconds must be >= 0");
    }

    double compute(op kind, int, const unit& u) const
    {
        const double t = detail::checked_time(model.seconds(u.rows(), u.tokens(), u.context()), u.rows(), u.tokens(),
                                              u.context());
        switch (kind) {
        case op::F: return forward_share * t;
        case op::B: return (1 - forward_share) * t;
        case op::I:
        case op::W: return (1 - forward_share) * t / 2;
        default: return 0;
        }
    }
    double transfer(op, int, int, const unit&) const { return transfer_seconds; }
};

} // namespace tpipe
