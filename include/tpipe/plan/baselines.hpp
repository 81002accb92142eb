#pragma once
// What a planned slicing is compared with, under the same objective
// T = sum_u t_u + (K-1) max_u t_u:
//   * microbatch-only pipelining (GPipe without token slicing): the best partition of the
//     batch into microbatches of whole sequences, found exactly by a sweep over the cap;
//   * the best uniform token slicing (m slices of floor or ceil of n/m units, longer first, as
//     TeraPipe's uniform_slice) shared by the given microbatches, over every m.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/plan/slicing_dp.hpp"

namespace tpipe {

//! The best microbatch-only plan: whole sequences, any partition of the batch into microbatches
//! of at most problem.max_microbatch rows (largest first).
template <latency_model M>
slicing_plan best_microbatch_only(const M& model, const slicing_problem& problem)
{
    detail::slicing::validate(problem);
    const std::int64_t B = problem.batch, L = problem.seq_len;
    const std::int64_t R = problem.max_microbatch == 0 ? B : std::min(B, problem.max_microbatch);
    const int K = problem.stages;
    constexpr double inf = std::numeric_limits<double>::infinity();
    std::vector<double> t(static_cast<std::size_t>(B) + 1, inf); // sizes above R stay +inf
    for (std::int64_t b = 1; b <= R; ++b) t[b] = detail::checked_time(model.seconds(b, L, 0), b, L, 0);
    // Sweep the cap over the sizes in order of their times. Admitting a size to an unbounded
    // knapsack is one pass in increasing a (it may take that size any number of times), so the
    // whole sweep is O(B^2), not O(B^2) per cap.
    std::vector<std::int64_t> order;
    for (std::int64_t b = 1; b <= R; ++b) order.push_back(b);
    std::stable_sort(order.begin(), order.end(), [&](auto x, auto y) { return t[x] < t[y]; });
    std::vector<double> g(static_cast<std::size_t>(B) + 1, inf);
    g[0] = 0;
    double best = inf, best_cap = inf;
    for (std::size_t i = 0; i < order.size();) {
        const double cap = t[order[i]];
        if (cap == inf || K * cap >= best) break;
        for (; i < order.size() && t[order[i]] == cap; ++i)
            for (std::int64_t a = order[i]; a <= B; ++a) g[a] = std::min(g[a], g[a - order[i]] + cap);
        if (g[B] + (K - 1) * cap < best) {
            best = g[B] + (K - 1) * cap;
            best_cap = cap;
        }
    }
    if (best == inf) detail::refuse("microbatch-only baseline: every whole-sequence microbatch has time +inf");
    // Rebuild with the largest parts first: least sum, then fewest microbatches.
    std::fill(g.begin(), g.end(), inf);
    std::vector<std::int64_t> count(static_cast<std::size_t>(B) + 1, 0), first(static_cast<std::size_t>(B) + 1, 0);
    g[0] = 0;
    for (std::int64_t a = 1; a <= B; ++a)
        for (std::int64_t b = a; b >= 1; --b)
            if (t[b] <= best_cap && g[a - b] < inf) {
                const double v = g[a - b] + t[b];
                if (v < g[a] || (v == g[a] && count[a - b] + 1 < count[a])) {
                    g[a] = v;
                    count[a] = count[a - b] + 1;
                    first[a] = b;
                }
            }
    slicing_plan plan;
    for (std::int64_t a = B; a > 0; a -= first[a]) {
        plan.microbatches.push_back(first[a]);
        plan.slices.push_back({L});
    }
    std::sort(plan.microbatches.rbegin(), plan.microbatches.rend());
    plan.stages = K;
    plan.seq_len = L;
    plan.objective = pipeline_objective(model, plan.scheme(), K, &plan.t_max, &plan.sum);
    return plan;
}

//! The best uniform token slicing shared by microbatches of the given sizes (among those
//! `accept` takes, if given; objective +inf when it takes none).
template <latency_model M>
slicing_plan best_uniform(const M& model, const slicing_problem& problem, const std::vector<std::int64_t>& microbatches,
                          const std::function<bool(const slicing_plan&)>& accept = {})
{
    detail::slicing::validate(problem);
    detail::require(!microbatches.empty(), "uniform baseline: give at least one microbatch size");
    const std::int64_t G = problem.granularity, n = problem.seq_len / G;
    const int K = problem.stages;
    slicing_plan best;
    best.objective = std::numeric_limits<double>::infinity();
    for (std::int64_t m = 1; m <= n; ++m) {
        slicing_plan plan;
        plan.stages = K;
        plan.seq_len = problem.seq_len;
        plan.microbatches = microbatches;
        std::vector<std::int64_t> lengths;
        for (std::int64_t i = 0; i < m; ++i) lengths.push_back((n / m + (i < n % m ? 1 : 0)) * G);
        plan.slices.assign(microbatches.size(), lengths);
        plan.objective = pipeline_objective(model, plan.scheme(), K, &plan.t_max, &plan.sum);
        if (plan.objective < best.objective && (!accept || accept(plan))) best = std::move(plan);
    }
    return best;
}

} // namespace tpipe
