#pragma once
// Discrete-event simulation of a lowered program: each rank runs its actions in order, computes
// take the cost model's time, a send delivers after the transfer time without blocking its
// rank, a receive blocks until delivery. Reports makespan, bubble fraction, per-rank busy time
// and peak live activations (units whose forward ran and whose last backward part has not).
#include <algorithm>
#include <vector>

#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/sim/costs.hpp"
#include "tpipe/sim/timeline.hpp"

namespace tpipe {

struct simulation {
    int ranks = 1;
    double makespan = 0;
    double bubble_fraction = 0;             //!< 1 - busy time over ranks x makespan
    std::vector<double> busy;               //!< per rank, seconds of compute
    std::vector<int> peak_activations;      //!< per rank, most units alive at once
    std::vector<timed_action> events;       //!< computes and transfers, in replay order
};

namespace detail {
template <cost_model C>
struct simulated_timing {
    const C& costs;
    simulation& out;
    double compute(const action& a, const unit& u) const { return costs.compute(a.kind, a.stage, u); }
    double transfer(const action& a, int from, int to, const unit& u) const { return costs.transfer(a.kind, from, to, u); }
    void record(int r, const action& a, double start, double end)
    {
        out.events.push_back(timed_action{r, a, start, end});
        if (is_compute(a.kind)) out.busy[r] += end - start;
        out.makespan = std::max(out.makespan, end);
    }
    void live(int r, int n) { out.peak_activations[r] = std::max(out.peak_activations[r], n); }
};
} // namespace detail

//! Simulates `p` (lowered first if it is compute-only). Throws tpipe::invalid_program if the
//! program breaks a rule or deadlocks.
template <cost_model C>
simulation simulate(const program& p, const C& costs)
{
    const program lowered = p.lowered() ? p : lower(p);
    simulation out;
    out.ranks = p.ranks;
    out.busy.assign(p.ranks, 0);
    out.peak_activations.assign(p.ranks, 0);
    detail::simulated_timing<C> timing{costs, out};
    if (auto v = detail::replayer<detail::simulated_timing<C>>(lowered, timing).run(); !v.ok())
        throw invalid_program(explain(lowered, v));
    double total = 0;
    for (double b : out.busy) total += b;
    out.bubble_fraction = out.makespan > 0 ? 1.0 - total / (p.ranks * out.makespan) : 0.0;
    return out;
}

} // namespace tpipe
