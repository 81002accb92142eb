#pragma once
// TeraPipe's slicing problem (plan/slicing_dp.hpp solves it): what to plan (slicing_problem),
// the plan (slicing_plan), the solver's work counters, and the objective a scheme scores under
// a latency model (pipeline_objective).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/slice/scheme.hpp"

namespace tpipe {

enum class cut_mode {
    shared,         //!< one token cut for every microbatch (a grid)
    per_microbatch  //!< an independent token cut per microbatch
};

//! What to plan: K stages, sequence length L, batch B rows, token granularity G.
struct slicing_problem {
    int stages = 1;
    std::int64_t seq_len = 1;
    std::int64_t batch = 1;
    std::int64_t granularity = 1;
    cut_mode mode = cut_mode::shared;
    std::int64_t max_microbatch = 0; //!< most rows in one microbatch; 0: the whole batch
    //! Shared cut: the most microbatch-size partitions of B searched exhaustively. Beyond it
    //! (B >= 26 rows at the default) only balanced partitions are searched (m microbatches of
    //! floor or ceil of B/m rows, every m) and the plan is no longer guaranteed optimal; the
    //! stats say so and give a certified lower bound when one is affordable.
    std::size_t max_partitions = 2000;
};

//! Work counters of one solve (for benchmarks and docs).
struct slicing_stats {
    std::size_t caps_considered = 0;  //!< candidate slices (edges) whose time lies inside the cap window
    std::size_t caps_evaluated = 0;   //!< distinct caps swept before the stop (singly or in chunks)
    std::size_t relaxations = 0;      //!< edge relaxations in the sweep
    std::size_t partitions = 0;       //!< microbatch-size partitions solved (shared mode)
    double solve_seconds = 0;
    //! False when shared mode searched only balanced partitions (more than max_partitions exist).
    bool exact = true;
    //! When not exact: the per-microbatch optimum, a lower bound on every shared plan (shared
    //! cuts are per-microbatch cuts that happen to agree), computed when B <= 256 rows; else 0.
    //! plan.objective / lower_bound - 1 bounds how far the plan can be from the optimum.
    double lower_bound = 0;
};

//! A planned slicing: microbatch sizes and each microbatch's token slice lengths.
struct slicing_plan {
    int stages = 1;
    std::int64_t seq_len = 1;
    std::vector<std::int64_t> microbatches;          //!< rows per microbatch, largest first
    std::vector<std::vector<std::int64_t>> slices;   //!< token lengths per microbatch, first token first
    double objective = 0;                            //!< sum_u t_u + (K-1) max_u t_u
    double t_max = 0;                                //!< max_u t_u
    double sum = 0;                                  //!< sum_u t_u
    slicing_stats stats;

    std::size_t units() const
    {
        std::size_t n = 0;
        for (const auto& s : slices) n += s.size();
        return n;
    }
    bool shared_cut() const
    {
        return std::all_of(slices.begin(), slices.end(), [&](const auto& s) { return s == slices.front(); });
    }
    //! The units as a scheme: microbatches in order, rows assigned consecutively.
    tpipe::scheme scheme() const
    {
        std::vector<tpipe::scheme::microbatch> mbs;
        std::int64_t row = 0;
        for (std::size_t m = 0; m < microbatches.size(); ++m) {
            std::vector<std::int64_t> cuts{0};
            for (auto l : slices[m]) cuts.push_back(cuts.back() + l);
            mbs.push_back({row, row + microbatches[m], std::move(cuts)});
            row += microbatches[m];
        }
        return tpipe::scheme(std::move(mbs));
    }
};

namespace detail {
constexpr double slicing_inf() { return std::numeric_limits<double>::infinity(); }
} // namespace detail

//! The objective of a scheme under a model: sum of unit times (microbatch-major, slices
//! ascending) + (K-1) * max. Refuses negative or NaN unit times.
template <latency_model M>
double pipeline_objective(const M& model, const tpipe::scheme& sch, int stages, double* t_max = nullptr,
                          double* sum = nullptr)
{
    detail::require(stages >= 1, "pipeline objective: stages must be >= 1, got " + std::to_string(stages));
    double total = 0, biggest = 0;
    for (int i = 0; i < sch.units(); ++i) {
        const unit u = sch.at(i);
        const double t = detail::checked_time(model.seconds(u.rows(), u.tokens(), u.context()), u.rows(), u.tokens(),
                                              u.context());
        total += t;
        biggest = std::max(biggest, t);
    }
    if (t_max) *t_max = biggest;
    if (sum) *sum = total;
    if (biggest == detail::slicing_inf()) return biggest; // not (K-1) * inf, which is NaN at K = 1
    return total + (stages - 1) * biggest;
}

} // namespace tpipe
