#pragma once
// Choosing a slicing plan by the schedule that runs it. TeraPipe's objective is exactly the
// makespan of GPipe over the units with free transfers (docs/planner.md); 1F1B over tokens, and
// transfers on the links as resources of their own, move the real makespan away from it by a
// few percent, and differently for different cuts. So: take the DP's optimal plan and the
// near-optimal shared cuts of its microbatch partition (rank_shared_cuts: the k best by the
// objective, or all within a fraction of it, at ranking_problem's granularity of at most 256
// token units), simulate the schedule over each, and keep the
// one with the least simulated makespan (the earliest-ranked among equals). The DP's own plan
// is always a candidate, so the choice never simulates slower than it.
#include <algorithm>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_costs.hpp"
#include "tpipe/plan/memory_model.hpp"
#include "tpipe/plan/ranked_cuts.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/sim/simulate.hpp"

namespace tpipe {

struct scheduled_plan {
    slicing_plan plan;
    double makespan = 0;                  //!< simulated
    std::vector<double> activation_bytes; //!< per rank, the simulated peak (with a memory model)
    double peak_bytes = 0;                //!< static bytes + the largest rank's activation peak
};

struct schedule_choice {
    std::vector<scheduled_plan> candidates; //!< [0]: the DP's plan; then the ranked cuts, best first
    std::size_t chosen = 0;                 //!< least simulated makespan among those that fit
    ranked_cuts ranking;                    //!< how the near-optimal set was found (its plans moved out)
};

//! Per rank, the most activation bytes alive at once in a simulated run of one stage per rank
//! (memory_model::peak_alive_bytes over each rank's events in order).
inline std::vector<double> peak_activation_bytes(const simulation& sim, const scheme& units, const memory_model& mem)
{
    std::vector<std::vector<action>> of_rank(static_cast<std::size_t>(sim.ranks));
    for (const auto& e : sim.events) of_rank[static_cast<std::size_t>(e.rank)].push_back(e.what);
    std::vector<double> peak;
    for (const auto& actions : of_rank) peak.push_back(mem.peak_alive_bytes(units, actions));
    return peak;
}

//! `p` at the finest granularity (a multiple of p.granularity dividing L) with at most 256
//! token units: at 1-token granularity thousands of cuts differ by a token or two, with the
//! same simulated makespan to a few microseconds, and would fill any candidate list.
inline slicing_problem ranking_problem(slicing_problem p)
{
    constexpr std::int64_t most_units = 256;
    for (std::int64_t g = p.granularity; g <= p.seq_len; g += p.granularity)
        if (p.seq_len % g == 0 && p.seq_len / g <= most_units) {
            p.granularity = g;
            return p;
        }
    return p;
}

//! Simulates schedule `name` (one stage per rank) over `plan`'s units on plan.stages ranks.
template <cost_model C>
simulation simulate_plan(std::string_view name, const slicing_plan& plan, const C& costs)
{
    detail::require(stages_per_rank(name) == 1,
                    "choosing slices by a schedule needs one pipeline stage per rank; " + std::string(name) +
                        " places " + std::to_string(stages_per_rank(name)) + " (use gpipe, 1f1b, zb-h1, terapipe-gpipe "
                        "or terapipe-1f1b)");
    return simulate(make_schedule(name).program(topology{plan.stages}, plan.scheme()), costs);
}

//! The same with each stage priced by its own model; refuses a plan of another number of
//! stages than there are models.
template <latency_model M>
simulation simulate_plan(std::string_view name, const slicing_plan& plan, const stage_latency_costs<M>& costs)
{
    costs.models.require_stages(plan.stages);
    return simulate_plan<stage_latency_costs<M>>(name, plan, costs);
}

//! The DP's plan `optimum` and the near-optimal shared cuts of its microbatch partition
//! (`opt`), each simulated under `schedule` with `costs`; the chosen one has the least makespan
//! among those whose static + activation peak fits `budget` bytes (with `mem`). Refuses when
//! none fits, naming the smallest need among the candidates.
template <latency_model M, cost_model C>
schedule_choice choose_by_schedule(const M& model, const slicing_problem& p, const slicing_plan& optimum,
                                   std::string_view schedule, const C& costs, const ranking_options& opt,
                                   const memory_model* mem = nullptr,
                                   double budget = std::numeric_limits<double>::infinity())
{
    detail::require(optimum.shared_cut(), "choosing slices by a schedule needs a shared-cut plan (every microbatch cut at the same tokens: slicing_plan::shared_cut())");
    schedule_choice out;
    out.ranking = rank_shared_cuts(model, ranking_problem(p), optimum.microbatches, opt);
    std::vector<slicing_plan> plans{optimum};
    for (auto& q : out.ranking.plans)
        if (q.slices != optimum.slices) plans.push_back(std::move(q));
    out.ranking.plans.clear();
    double least_need = std::numeric_limits<double>::infinity();
    bool any = false;
    for (auto& q : plans) {
        scheduled_plan c;
        const simulation sim = simulate_plan(schedule, q, costs);
        c.makespan = sim.makespan;
        if (mem) {
            c.activation_bytes = peak_activation_bytes(sim, q.scheme(), *mem);
            c.peak_bytes = mem->static_bytes() + *std::max_element(c.activation_bytes.begin(), c.activation_bytes.end());
        }
        c.plan = std::move(q);
        least_need = std::min(least_need, c.peak_bytes);
        const bool fits = c.peak_bytes <= budget;
        if (fits && (!any || c.makespan < out.candidates[out.chosen].makespan)) out.chosen = out.candidates.size();
        any = any || fits;
        out.candidates.push_back(std::move(c));
    }
    detail::require(any, "no plan fits in " + std::to_string(budget) + " bytes per device: the least need among the " +
                             std::to_string(out.candidates.size()) + " near-optimal plans simulated under " +
                             std::string(schedule) + " is " + std::to_string(least_need) +
                             " bytes; give more memory, more stages or more tensor parallelism");
    return out;
}

} // namespace tpipe
