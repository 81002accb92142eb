#pragma once
// A slicing plan that fits in a device's memory under the schedule the DP's objective prices
// (GPipe: every unit alive on the first stage at its first backward, memory_model::all_alive_bytes).
// Only the units' saved activations depend on the token cut (the K/V buffers depend on the
// microbatches, the weights on nothing), and they add up over units, so the search is
// rank_shared_cuts over the DP's microbatches with that sum as its budget: the first cut it
// returns is the best fitting one by the objective. When the search stops before finding one,
// the best fitting uniform cut is taken instead (feasible, not certified optimal).
#include <algorithm>
#include <cmath>
#include <limits>

#include "tpipe/plan/baselines.hpp"
#include "tpipe/plan/memory_model.hpp"
#include "tpipe/plan/ranked_cuts.hpp"

namespace tpipe {

struct memory_fit {
    slicing_plan plan;       //!< the plan to run: the DP's when it fits
    bool fits = false;       //!< plan fits the budget
    bool certified = true;   //!< plan is the best fitting cut of the DP's microbatches (else a uniform fallback)
    double bytes = 0;        //!< static + activations of plan
    double least_bytes = 0;  //!< the least any plan of the problem needs (one-row microbatches, G-token slices)
    std::size_t nodes = 0;   //!< partial cuts the search queued (0: the DP's plan fitted)
};

template <latency_model M>
memory_fit fit_in_memory(const M& model, const slicing_problem& p, const slicing_plan& optimum,
                         const memory_model& mem, double budget)
{
    memory_fit out;
    auto need = [&](const slicing_plan& q) { return mem.static_bytes() + mem.all_alive_bytes(q.scheme()); };
    out.least_bytes = mem.static_bytes() + mem.least_all_alive_bytes(p.batch, p.granularity);
    out.plan = optimum;
    out.bytes = need(optimum);
    out.fits = out.bytes <= budget;
    if (out.fits || out.least_bytes > budget || !optimum.shared_cut()) return out;

    double fixed = mem.static_bytes(), largest = 0;
    for (auto b : optimum.microbatches) {
        fixed += mem.kv_bytes(b);
        largest = std::max(largest, mem.kv_bytes(b));
    }
    const unit_budget activations{[&](std::int64_t b, std::int64_t s, std::int64_t c) { return mem.unit_bytes(b, s, c); },
                                  budget - fixed - largest};
    auto fits = [&](const slicing_plan& q) { return need(q) <= budget; };
    auto found = rank_shared_cuts(model, p, optimum.microbatches, {.max_plans = 1, .within = 0}, fits, activations);
    out.nodes = found.nodes;
    if (!found.plans.empty()) {
        out.plan = std::move(found.plans.front());
    } else {
        auto uniform = best_uniform(model, p, optimum.microbatches, fits);
        if (!std::isfinite(uniform.objective)) return out; // nothing found: the DP's plan, not fitting
        out.plan = std::move(uniform);
        out.certified = false;
    }
    out.plan.stats = optimum.stats;
    out.plan.stats.exact = optimum.stats.exact && out.certified;
    if (!out.certified) out.plan.stats.lower_bound = 0;
    out.bytes = need(out.plan);
    out.fits = true;
    return out;
}

} // namespace tpipe
