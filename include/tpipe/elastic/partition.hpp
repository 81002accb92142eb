#pragma once
// Contiguous layers -> K pipeline stages minimising the slowest stage, exactly (dynamic
// programming over cut positions, O(K n^2)), not the released code's greedy with a variance
// slack (which can leave a stage empty).
//
// Costs are per pipelined unit (a layer, or the paper's half-layer sublayers), in any unit:
// parameter counts, modelled or measured seconds. The first `frozen` units are the frozen
// prefix: it stays with stage 0 (the pipeline's first device runs it, forward only) and is
// charged lambda times its cost (the paper's 1/6, or 0 as the released code effectively does).
// Every stage holds at least one active unit, so K stages need n - frozen >= K.
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe::elastic {

struct partition {
    std::vector<int> cuts;            //!< 0 = c_0 < c_1 < ... < c_K = n; stage s holds [c_s, c_{s+1})
    std::vector<double> stage_costs;  //!< per stage, frozen units weighted by lambda
    double max_stage_cost = 0;

    int stages() const { return static_cast<int>(stage_costs.size()); }
};

//! The most steps partition_layers takes (stages x units^2 / 2): a few seconds.
inline constexpr double max_partition_work = 2e9;

} // namespace tpipe::elastic

namespace tpipe::detail {
inline void check_partition_input(std::span<const double> costs, int stages, int frozen, double lambda)
{
    const int n = static_cast<int>(costs.size());
    require(stages >= 1, "partition: stages must be >= 1, got " + std::to_string(stages));
    require(frozen >= 0 && frozen <= n, "partition: frozen must lie in [0, " + std::to_string(n) +
                                            " units], got " + std::to_string(frozen));
    require(std::isfinite(lambda) && lambda >= 0, "partition: lambda (frozen cost factor) must be finite and >= 0, got " +
                                                      std::to_string(lambda));
    for (int i = 0; i < n; ++i)
        require(std::isfinite(costs[i]) && costs[i] >= 0, "partition: cost of unit " + std::to_string(i) +
                                                             " must be finite and >= 0, got " +
                                                             std::to_string(costs[i]));
    require(n - frozen >= stages, "partition: " + std::to_string(stages) + " stages need at least " +
                                      std::to_string(stages) + " active units, but only " + std::to_string(n - frozen) +
                                      " of " + std::to_string(n) + " are active (" + std::to_string(frozen) +
                                      " frozen); use fewer stages");
    // Every stage cost is a sum of unit costs: the whole sum must stay finite, or "inf" would be
    // printed as a result.
    double total = 0;
    for (int i = 0; i < n; ++i) total += (i < frozen ? lambda : 1.0) * costs[i];
    require(std::isfinite(total), "partition: the costs add up to more than a double holds (above 1.8e308); "
                                  "give them in a larger unit so that their sum is finite");
    // The exact search tries every last cut for every stage and prefix: stages x n^2 / 2 steps.
    const double work = double(stages) * double(n) * double(n) / 2;
    require(work <= elastic::max_partition_work,
            "partition: " + std::to_string(n) + " units x " + std::to_string(stages) + " stages is about " +
                std::to_string(static_cast<long long>(work)) + " steps of the exact search (stages x units^2 / 2); "
                "it does at most " + std::to_string(static_cast<long long>(elastic::max_partition_work)) +
                " (a few seconds): group units into fewer, coarser ones, or use fewer stages");
}
} // namespace tpipe::detail

namespace tpipe::elastic {

//! Stage costs of given cuts (frozen prefix weighted by lambda), checked like partition_layers.
inline partition priced_partition(std::span<const double> costs, std::vector<int> cuts, int frozen = 0,
                                  double lambda = 0)
{
    const int n = static_cast<int>(costs.size());
    detail::require(cuts.size() >= 2 && cuts.front() == 0 && cuts.back() == n,
                    "partition: cuts must run from 0 to " + std::to_string(n));
    const int stages = static_cast<int>(cuts.size()) - 1;
    detail::check_partition_input(costs, stages, frozen, lambda);
    detail::require(cuts[1] > frozen, "partition: stage 0 must hold the frozen prefix and an active unit");
    partition p;
    p.cuts = std::move(cuts);
    for (int s = 0; s < stages; ++s) {
        detail::require(p.cuts[s] < p.cuts[s + 1], "partition: stage " + std::to_string(s) + " is empty");
        double c = 0;
        for (int i = p.cuts[s]; i < p.cuts[s + 1]; ++i) c += (i < frozen ? lambda : 1.0) * costs[i];
        p.stage_costs.push_back(c);
        p.max_stage_cost = std::max(p.max_stage_cost, c);
    }
    return p;
}

//! The partition of `costs` into `stages` contiguous stages with the smallest slowest stage.
//! Deterministic among equal optima. Refuses (tpipe::invalid_argument) fewer active units than stages.
inline partition partition_layers(std::span<const double> costs, int stages, int frozen = 0, double lambda = 0)
{
    detail::check_partition_input(costs, stages, frozen, lambda);
    const int n = static_cast<int>(costs.size());
    std::vector<double> prefix(n + 1, 0);  // weighted prefix sums
    for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + (i < frozen ? lambda : 1.0) * costs[i];
    const double inf = std::numeric_limits<double>::infinity();
    // best[k][j]: smallest slowest stage when units [0, j) form k stages; from[k][j]: the last cut.
    std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
    std::vector<std::vector<int>> from(stages + 1, std::vector<int>(n + 1, -1));
    for (int j = frozen + 1; j <= n; ++j) best[1][j] = prefix[j];
    for (int k = 2; k <= stages; ++k)
        for (int j = frozen + k; j <= n; ++j)
            for (int i = frozen + k - 1; i < j; ++i) {
                const double c = std::max(best[k - 1][i], prefix[j] - prefix[i]);
                if (c < best[k][j]) best[k][j] = c, from[k][j] = i;
            }
    std::vector<int> cuts(stages + 1, n);
    for (int k = stages, j = n; k > 1; --k) j = cuts[k - 1] = from[k][j];
    cuts[0] = 0;
    return priced_partition(costs, std::move(cuts), frozen, lambda);
}

} // namespace tpipe::elastic
