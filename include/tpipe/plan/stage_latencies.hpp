#pragma once
// One latency model per pipeline stage, planned as the slowest stage.
//
// The TeraPipe DP (plan/slicing_dp.hpp) prices a unit u by one t_u, the same on every stage.
// When stages differ (the last one holds the LM head, the first the embedding), stage k costs
// t_{k,u} of its own; slowest_stage_latency is the latency model M_u = max_k t_{k,u}, so that
//     plan_slices(slowest_stage_latency<M>({stage_0, ..., stage_{K-1}}), problem)
// minimises T = sum_u M_u + (K-1) max_u M_u over the cuts. What that T is (checked against the
// simulator in tests/plan/test_stage_latencies.cpp):
//   * GPipe over the units (each stage runs the forwards in order, then the backwards), with
//     free transfers and each pass a fixed share of its stage's t (stage_latency_costs in
//     plan/latency_costs.hpp), finishes at the longest path through the K x n grid of
//     forwards and then the one of backwards. A path visits every unit once per wave plus K-1
//     more cells, each priced at most M_u, so the makespan with each stage priced by its own
//     model is <= T: an upper bound, exact when every stage takes the same time for every
//     slice (K identical models plan exactly as the one model; the flow-shop identity).
//   * It is NOT exact merely because one stage is the slowest on every slice. The path along
//     that stage collects sum_u M_u exactly, but fill and drain run at the other stages'
//     times, not at max_u M_u:
//         sum_u M_u <= makespan <= T,
//     strictly below T (K >= 2) when the other stages are faster on every unit. The DP
//     minimises an upper bound whose fill/drain term is pessimistic by at most
//     (K-1) max_u M_u, and it does not see which stage sits where (the max is symmetric in
//     the stages) although the makespan does.
// `tpipe-plan slice --model a.json --model b.json ...` (one per stage) prints both numbers.
//
// Token monotonicity is kept: a maximum of functions non-decreasing in s is non-decreasing in
// s, so monotone_in_tokens() (present when M has it) is the conjunction of the stages'.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"

namespace tpipe {

template <latency_model M>
class slowest_stage_latency {
public:
    //! stages[k]: stage k's latency model, k = 0..K-1. Refuses an empty list and, for
    //! any_latency, a stage without a model (naming it).
    explicit slowest_stage_latency(std::vector<M> stages)
        : stages_(std::make_shared<const std::vector<M>>(std::move(stages)))
    {
        detail::require(!stages_->empty(), "slowest_stage_latency: the list of stage models is empty; give one "
                                           "latency model per pipeline stage (at least one)");
        if constexpr (std::same_as<M, any_latency>)
            for (std::size_t k = 0; k < stages_->size(); ++k)
                detail::require((*stages_)[k].has_value(),
                                "slowest_stage_latency: stage " + std::to_string(k) + " of " +
                                    std::to_string(stages_->size()) + " has no model (an empty any_latency)");
    }

    //! The slowest stage's time for the unit: max_k t_k(b, s, c).
    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        double slowest = 0;
        for (const auto& m : *stages_) {
            const double t = static_cast<double>(m.seconds(b, s, c));
            if (std::isnan(t)) return t; // checked_time names it where the planners use it
            slowest = std::max(slowest, t);
        }
        return slowest;
    }

    //! True when every stage's model promises t non-decreasing in s.
    bool monotone_in_tokens() const
        requires token_monotone_latency_model<M>
    {
        return std::all_of(stages_->begin(), stages_->end(), [](const M& m) { return m.monotone_in_tokens(); });
    }

    int stages() const { return static_cast<int>(stages_->size()); }
    //! Stage k's model (0 <= k < stages()).
    const M& stage(int k) const
    {
        detail::require(k >= 0 && k < stages(), "slowest_stage_latency: stage " + std::to_string(k) +
                                                    " asked of a pipeline with " + std::to_string(stages()) +
                                                    " stage models (stages 0.." + std::to_string(stages() - 1) + ")");
        return (*stages_)[static_cast<std::size_t>(k)];
    }

    //! Refuses a pipeline of `pipeline_stages` stages unless there is one model per stage.
    void require_stages(int pipeline_stages) const
    {
        detail::require(pipeline_stages == stages(),
                        "slowest_stage_latency: " + std::to_string(stages()) + " stage models for a pipeline of " +
                            std::to_string(pipeline_stages) + " stages; give one latency model per stage");
    }

private:
    std::shared_ptr<const std::vector<M>> stages_; // shared: copies (any_latency, costs) stay cheap
};

template <latency_model M>
slowest_stage_latency(std::vector<M>) -> slowest_stage_latency<M>;

} // namespace tpipe
