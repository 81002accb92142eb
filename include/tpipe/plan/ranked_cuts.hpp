#pragma once
// The shared token cuts of a fixed microbatch partition in increasing order of TeraPipe's
// objective T = sum_u t_u + (K-1) max_u t_u: the near-optimal plans, for choosing among them by
// something the objective does not price (the simulated makespan of the schedule that runs,
// memory).
//
// Best-first search over token positions. A partial cut ending at position k with sum S and
// largest unit x has the bound
//     S + min_j [ r_j[k] + (K-1) * max(x, z[k], cap_{j-1}) ]
// where r_j[k] is the least sum of a completion whose slices are all <= cap_j (cap_{-1} = 0,
// the last bucket uncapped) and z[k] the least possible largest slice of any completion (a
// bottleneck path): every completion falls in some bucket and costs at least its term. A complete cut's bound is its
// objective, so cuts leave the queue in exact objective order. The search stops
//   * once `max_plans` accepted cuts are listed, or
//   * once the next bound exceeds (1 + within) x the best accepted objective: then every
//     accepted cut within `within` of the best is listed (`complete`), or
//   * when the queue runs dry (`complete`: no other cut exists), or
//   * after `max_nodes` partial cuts were queued (not complete: `next_bound` still bounds the rest).
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <queue>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/slicing_dp.hpp"

namespace tpipe {

struct ranking_options {
    std::size_t max_plans = 64;        //!< most cuts listed
    double within = 0.05;              //!< list every cut within this fraction of the best accepted one
    std::size_t max_nodes = 4'000'000; //!< partial cuts queued before giving up on completeness
};

//! An additive per-unit resource that a plan's units must not exceed in total, e.g. the saved
//! activations of every unit alive at once: prefixes that cannot complete within `limit` (even
//! with the least-resource completion) are never explored.
struct unit_budget {
    std::function<double(std::int64_t b, std::int64_t s, std::int64_t c)> cost;
    double limit = std::numeric_limits<double>::infinity();
};

struct ranked_cuts {
    std::vector<slicing_plan> plans;  //!< best first, each with objective, t_max and sum
    bool complete = false;            //!< every accepted cut within `within` of plans.front() is listed
    double next_bound = 0;            //!< every cut not listed has objective >= this (+inf: none left)
    std::size_t nodes = 0;            //!< partial cuts queued
};

//! The accepted shared cuts of `p` (at its granularity) for microbatch sizes `rows`, best first.
//! `accept` (default: all) filters complete plans; rejected plans are not counted against
//! `max_plans`. With `budget`, only cuts whose units' total cost stays within its limit.
template <latency_model M>
ranked_cuts rank_shared_cuts(const M& model, const slicing_problem& p, const std::vector<std::int64_t>& rows,
                             const ranking_options& opt = {},
                             const std::function<bool(const slicing_plan&)>& accept = {},
                             const unit_budget& budget = {})
{
    namespace ds = detail::slicing;
    detail::require(p.stages >= 1 && p.granularity >= 1 && p.seq_len % p.granularity == 0,
                    "ranked cuts: stages >= 1 and a granularity dividing seq_len needed");
    detail::require(!rows.empty() && opt.max_plans >= 1 && opt.within >= 0,
                    "ranked cuts: need microbatch sizes, max_plans >= 1 and within >= 0");
    const int n = static_cast<int>(p.seq_len / p.granularity);
    const ds::triangle tri(n);
    // Edge (i, i+s): w = sum over microbatches, h = the largest unit.
    std::vector<double> w(tri.size(), 0), h(tri.size(), 0);
    std::map<std::int64_t, int> count;
    for (auto b : rows) ++count[b];
    for (const auto& [b, k] : count) {
        const auto t = ds::unit_times(model, tri, b, p.granularity);
        for (std::size_t e = 0; e < t.size(); ++e) {
            w[e] += k * t[e];
            h[e] = std::max(h[e], t[e]);
        }
    }
    std::vector<double> use(budget.cost ? tri.size() : 0, 0), least_use(n + 1, 0); // resource per edge, least to the end
    if (budget.cost) {
        for (int i = 0; i < n; ++i)
            for (int s = 1; s <= n - i; ++s)
                for (auto b : rows) use[tri.offset[i] + s - 1] += budget.cost(b, s * p.granularity, i * p.granularity);
        for (int i = n - 1; i >= 0; --i) {
            least_use[i] = ds::inf;
            for (int s = 1; s <= n - i; ++s) least_use[i] = std::min(least_use[i], use[tri.offset[i] + s - 1] + least_use[i + s]);
        }
    }
    const double inf = ds::inf, K1 = p.stages - 1;
    const ds::path_problem path(tri, w.data(), h.data());
    std::vector<double> z(n + 1, inf); // least possible largest slice of a completion from k
    z[n] = 0;
    for (int i = n - 1; i >= 0; --i)
        for (int s = 1; s <= n - i; ++s) z[i] = std::min(z[i], std::max(h[tri.offset[i] + s - 1], z[i + s]));
    // Capped completion sums r_j at caps spread from the least feasible cap to the largest
    // unit of the best uniform plan's neighbourhood: a completion whose largest slice lies in
    // (cap_{j-1}, cap_j] costs at least r_j[k] + (K-1) max(x, cap_{j-1}). Without them the
    // bound pairs the uncapped least sum with the bottleneck, which no single completion reaches.
    const auto [uniform_objective, uniform_cap] = path.best_uniform(p.stages);
    std::vector<double> caps;
    std::vector<std::vector<double>> capped;
    if (path.min_cap < inf) {
        const double hi = std::max(uniform_cap, uniform_objective * (1 + opt.within) / p.stages);
        constexpr int steps = 64;
        for (int j = 0; j < steps; ++j) caps.push_back(path.min_cap + (hi - path.min_cap) * j / (steps - 1));
        capped.resize(caps.size());
        for (std::size_t j = 0; j < caps.size(); ++j) path.suffix_capped(caps[j], capped[j]);
    }

    struct node {
        int pos, parent;
        double sum, max, use;
    };
    std::vector<node> nodes{{0, -1, 0, 0, 0}};
    using entry = std::pair<double, int>; // bound, node; smaller node first among equal bounds
    std::priority_queue<entry, std::vector<entry>, std::greater<>> queue;
    auto bound = [&](const node& x) {
        const int k = x.pos;
        const double lo = std::max(x.max, z[k]);
        if (lo == inf) return inf;
        double best = path.lower[k] + K1 * std::max(lo, caps.empty() ? 0.0 : caps.back()); // beyond the last cap
        for (std::size_t j = 0; j < caps.size(); ++j)
            if (capped[j][k] < inf)
                best = std::min(best, capped[j][k] + K1 * std::max(lo, j ? caps[j - 1] : 0.0));
        return x.sum + best;
    };
    if (bound(nodes[0]) < inf && (!budget.cost || least_use[0] <= budget.limit * (1 + ds::slack)))
        queue.push({bound(nodes[0]), 0});

    ranked_cuts out;
    auto finish = [&](bool complete, double next_bound) {
        out.complete = complete;
        out.next_bound = next_bound;
        out.nodes = nodes.size();
        return std::move(out);
    };
    double limit = inf;
    while (!queue.empty()) {
        const auto [b, id] = queue.top();
        if (b > limit) return finish(true, b);
        queue.pop();
        const node x = nodes[id];
        if (x.pos == n) {
            slicing_plan plan;
            plan.stages = p.stages;
            plan.seq_len = p.seq_len;
            plan.microbatches = rows;
            std::vector<std::int64_t> cut;
            for (int k = id; nodes[k].parent >= 0; k = nodes[k].parent)
                cut.insert(cut.begin(), (nodes[k].pos - nodes[nodes[k].parent].pos) * p.granularity);
            plan.slices.assign(rows.size(), cut);
            plan.objective = pipeline_objective(model, plan.scheme(), p.stages, &plan.t_max, &plan.sum);
            if (accept && !accept(plan)) continue;
            if (out.plans.empty()) limit = plan.objective * (1 + opt.within) * (1 + ds::slack);
            out.plans.push_back(std::move(plan));
            if (out.plans.size() == opt.max_plans) {
                const double next = queue.empty() ? inf : queue.top().first;
                return finish(next > limit, next);
            }
            continue;
        }
        if (nodes.size() >= opt.max_nodes) return finish(false, b);
        for (int s = 1; s <= n - x.pos; ++s) {
            const std::size_t e = tri.offset[x.pos] + s - 1;
            if (h[e] == inf) continue;
            const node child{x.pos + s, id, x.sum + w[e], std::max(x.max, h[e]), budget.cost ? x.use + use[e] : 0};
            if (budget.cost && child.use + least_use[child.pos] > budget.limit * (1 + ds::slack)) continue;
            const double cb = bound(child);
            if (cb > limit) continue;
            nodes.push_back(child);
            queue.push({cb, static_cast<int>(nodes.size()) - 1});
        }
    }
    return finish(true, inf);
}

} // namespace tpipe
