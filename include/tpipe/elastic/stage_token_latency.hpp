#pragma once
// The token-level latency of an elastic pipeline's slowest stage, composed from per-unit
// latencies measured once: a stage's time for b rows, s tokens and c context is the sum over its
// active units, the pipeline's the slowest stage's. Every re-plan re-cuts the units, so the
// TeraPipe DP (plan_slices) prices the new depth without profiling again. Frozen units are not
// in the pipeline (their outputs come from the frozen prefix before it), so they cost nothing.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/table_latency.hpp"

namespace tpipe::elastic {

class stage_token_latency {
public:
    //! `cuts`: stage boundaries over the units, cuts.front() = the frozen count.
    stage_token_latency(std::span<const table_latency> units, std::span<const int> cuts)
        : units_(units), cuts_(cuts.begin(), cuts.end())
    {
        detail::require(cuts_.size() >= 2 && cuts_.back() <= static_cast<int>(units_.size()) && cuts_.front() >= 0,
                        "stage_token_latency: cuts must be >= 2 points within the " + std::to_string(units_.size()) +
                            " measured units");
    }

    //! Context never makes a unit cheaper: each unit costs at least its context-free time (a
    //! fitted context term that dips below zero on noisy profiles cannot make a unit negative).
    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        double slowest = 0;
        for (std::size_t k = 0; k + 1 < cuts_.size(); ++k) {
            double t = 0;
            for (int u = cuts_[k]; u < cuts_[k + 1]; ++u) {
                const auto& m = units_[static_cast<std::size_t>(u)];
                t += std::max(m.seconds(b, s, c), m.seconds(b, s, 0));
            }
            slowest = std::max(slowest, t);
        }
        return slowest;
    }

private:
    std::span<const table_latency> units_;
    std::vector<int> cuts_;
};

} // namespace tpipe::elastic
