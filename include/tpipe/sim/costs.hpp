#pragma once
// Cost models say how long each action takes in the simulator: compute by kind, stage and unit,
// transfer by direction, stages and unit. Times are in seconds.
#include <concepts>

#include "tpipe/core/unit.hpp"
#include "tpipe/schedule/action.hpp"

namespace tpipe {

template <class C>
concept cost_model = requires(const C& c, op kind, int stage, const unit& u) {
    { c.compute(kind, stage, u) } -> std::convertible_to<double>;
    { c.transfer(kind, stage, stage, u) } -> std::convertible_to<double>;
};

//! The same cost on every stage: forward f, input-gradient b, weight-gradient w (a full
//! backward B costs b + w), and comm per transfer. With `tokens_per_microbatch` set, a token
//! slice costs its share of a whole microbatch (tokens / tokens_per_microbatch); otherwise each
//! unit costs the full amount.
struct uniform_costs {
    double f = 1;
    double b = 1;
    double w = 1;
    double comm = 0;
    long long tokens_per_microbatch = 0;

    constexpr double share(const unit& u) const
    {
        return tokens_per_microbatch > 0 ? static_cast<double>(u.tokens()) / static_cast<double>(tokens_per_microbatch)
                                         : 1.0;
    }
    constexpr double compute(op kind, int, const unit& u) const
    {
        const double t = kind == op::F ? f : kind == op::B ? b + w : kind == op::I ? b : kind == op::W ? w : 0;
        return t * share(u);
    }
    constexpr double transfer(op, int, int, const unit& u) const { return comm * share(u); }
};

} // namespace tpipe
