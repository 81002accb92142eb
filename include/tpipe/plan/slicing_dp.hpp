#pragma once
// TeraPipe's slicing problem, solved exactly.
//
// Units u of one iteration (microbatch x token slice) each take t_u = t(b, s, c) on every one
// of K stages. The planner minimises the flow-shop makespan
//     T = sum_u t_u + (K - 1) * max_u t_u
// over token cuts at granularity G (n = L / G token units) and row splits of the batch B:
//   * cut_mode::shared: microbatch sizes b_1..b_m (any partition of B) and ONE token cut
//     l_1..l_k used by every microbatch (what a grid runtime executes), so
//     T = sum_m sum_i t(b_m, l_i, c_i) + (K - 1) * max_{m,i} t(b_m, l_i, c_i);
//   * cut_mode::per_microbatch: every microbatch has its own token cut.
//
// Method: T = min over caps tau of [ S_tau + (K - 1) * tau ], S_tau = the least sum with every
// unit <= tau (a shortest path over token positions). The candidate caps are the unit times
// themselves, swept in increasing order while the shortest-path labels are updated
// incrementally as each new edge (slice) becomes admissible. What keeps it exact and fast:
//   * the sweep starts from a feasible objective (best uniform cut, uncapped least-sum cut)
//     and stops when K*tau or S_min + (K-1)*tau exceeds the best objective found;
//   * a label f[k] is only stored and propagated when f[k] + r[k] + rest + (K-1)*tau could
//     beat the best objective (r[k] = least cost from k to the end under the largest cap still
//     worth trying, a lower bound for every completion the sweep can use); tau only grows and
//     the best only falls, so a label pruned once stays useless;
//   * caps are taken in galloping chunks: a chunk whose lower bound S_last + (K-1)*tau_first
//     already loses is inserted with one propagation wave; otherwise it is undone and halved,
//     down to single caps, which are evaluated exactly;
//   * where t is non-decreasing in s for a context (checked on the values, per context), the
//     admissible slices form a prefix and scans stop at the first slice over the cap.
// Rounding is handled by pruning only with a relative slack of 1e-10, which can only keep
// more candidates. No candidate cap is ever skipped for being close to another.
//
// Tie-breaking (deterministic): smallest T, then smallest t_max, then fewest units, then the
// lexicographically smallest list of microbatch sizes (listed largest first), then the
// lexicographically smallest slice lengths (first token first, microbatch by microbatch).
// Costs are compared exactly in double arithmetic; in the final canonical pass a path's
// cost is summed from its last slice to its first.
//
// The problem's types are in plan/slicing_problem.hpp, the capped shortest paths and the cap
// sweep in plan/detail/slicing_paths.hpp, the row partitions and checks in
// plan/detail/slicing_partitions.hpp; this file is the solver that combines them.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/detail/slicing_partitions.hpp"
#include "tpipe/plan/detail/slicing_paths.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/plan/slicing_problem.hpp"
#include "tpipe/slice/scheme.hpp"

namespace tpipe {

//! The exact optimum of the slicing problem (see the file comment for objective and ties).
//! Refuses invalid problems, negative or NaN unit times, and problems no finite cut solves.
template <latency_model M>
slicing_plan plan_slices(const M& model, const slicing_problem& problem)
{
    namespace ds = detail::slicing;
    ds::validate(problem);
    const auto clock_start = std::chrono::steady_clock::now();
    const int n = static_cast<int>(problem.seq_len / problem.granularity);
    const std::int64_t G = problem.granularity, B = problem.batch;
    // Microbatch sizes considered: 1..R (a table profiled up to R rows cannot price more).
    const std::int64_t R = problem.max_microbatch == 0 ? B : std::min(B, problem.max_microbatch);
    const int K = problem.stages;
    const ds::triangle tri(n);

    // Unit times per microbatch size, computed once.
    std::vector<std::vector<double>> times(static_cast<std::size_t>(R) + 1);
    auto times_for = [&](std::int64_t b) -> const std::vector<double>& {
        auto& t = times[static_cast<std::size_t>(b)];
        if (t.empty()) t = ds::unit_times(model, tri, b, G);
        return t;
    };

    slicing_plan result;
    result.stages = K;
    result.seq_len = problem.seq_len;
    slicing_stats stats;
    auto to_tokens = [&](const std::vector<int>& lengths) {
        std::vector<std::int64_t> out;
        for (int l : lengths) out.push_back(l * G);
        return out;
    };
    auto finish = [&](slicing_plan& plan) {
        plan.stages = K;
        plan.seq_len = problem.seq_len;
        plan.objective = pipeline_objective(model, plan.scheme(), K, &plan.t_max, &plan.sum);
    };
    const auto unsolvable = [&] {
        detail::refuse("slicing: no token cut has finite unit times for L=" + std::to_string(problem.seq_len) +
                       ", G=" + std::to_string(G) + ", B=" + std::to_string(B) +
                       "; the latency model returns +inf for every candidate slice");
    };

    if (problem.mode == cut_mode::per_microbatch || B == 1) {
        std::vector<ds::path_problem> probs;
        probs.reserve(static_cast<std::size_t>(R));
        for (std::int64_t b = 1; b <= R; ++b) {
            const auto& t = times_for(b);
            probs.emplace_back(tri, t.data(), t.data());
        }
        // Only size B is used when B == 1; with several sizes any partition of B may appear.
        std::vector<const ds::path_problem*> ptrs;
        for (const auto& p : probs) ptrs.push_back(&p);
        // least_sum[a] = least uncapped sum over partitions of a rows (knapsack on lower bounds)
        std::vector<double> least_sum(static_cast<std::size_t>(B) + 1, ds::inf);
        least_sum[0] = 0;
        for (std::int64_t a = 1; a <= B; ++a)
            for (std::int64_t b = 1; b <= std::min(a, R); ++b)
                least_sum[a] = std::min(least_sum[a], least_sum[a - b] + probs[b - 1].lower[0]);
        std::vector<double> rest;
        for (std::int64_t b = 1; b <= R; ++b) rest.push_back(least_sum[B - b]);
        auto combine = [&](const std::vector<std::vector<double>>& f) {
            std::vector<double> g(static_cast<std::size_t>(B) + 1, ds::inf);
            g[0] = 0;
            for (std::int64_t a = 1; a <= B; ++a)
                for (std::int64_t b = 1; b <= std::min(a, R); ++b) g[a] = std::min(g[a], g[a - b] + f[b - 1][n]);
            return g[B];
        };
        // A feasible start: all rows in one microbatch with its uncapped least-sum cut.
        ds::sweep_result start;
        {
            std::vector<double> f, pmax;
            probs.back().capped(ds::inf, f, &pmax);
            if (R == B && f[n] < ds::inf) start = {f[n] + (K - 1) * pmax[n], pmax[n]};
            // B equal microbatches of one row, each cut uniformly (feasible whenever b = 1 is).
            const auto [value, cap] = probs.front().best_uniform(K);
            const double all_rows = B * (value - (K - 1) * cap) + (K - 1) * cap;
            if (value < ds::inf && all_rows < start.objective) start = {all_rows, cap};
        }
        const auto found = ds::sweep(ptrs, rest, K, least_sum[B], start, ds::inf, combine, stats);
        if (found.objective == ds::inf) unsolvable();

        // Canonical pass at the optimal cap: per size, then sizes by a DP over partitions that
        // lists the largest part first and prefers the smallest first part on ties.
        std::vector<ds::canonical_cut> cut(static_cast<std::size_t>(B) + 1);
        for (std::int64_t b = 1; b <= R; ++b) cut[b] = ds::canonical(probs[b - 1], found.cap);
        struct key {
            double cost = ds::inf;
            std::int64_t units = 0;
            std::int64_t first = 0;
        };
        // best[a][p]: partitions of a rows into parts <= p
        std::vector<std::vector<key>> best(static_cast<std::size_t>(B) + 1,
                                           std::vector<key>(static_cast<std::size_t>(B) + 1));
        for (std::int64_t p = 0; p <= B; ++p) best[0][p] = {0, 0, 0};
        for (std::int64_t a = 1; a <= B; ++a)
            for (std::int64_t p = 1; p <= B; ++p)
                for (std::int64_t d = 1; d <= std::min(a, p); ++d) {
                    const key& tail = best[a - d][d];
                    if (cut[d].cost == ds::inf || tail.cost == ds::inf) continue;
                    const key k{cut[d].cost + tail.cost, cut[d].units + tail.units, d};
                    key& cur = best[a][p];
                    if (k.cost < cur.cost || (k.cost == cur.cost && k.units < cur.units)) cur = k;
                }
        if (best[B][B].cost == ds::inf) unsolvable();
        for (std::int64_t a = B, p = B; a > 0;) {
            const std::int64_t d = best[a][p].first;
            result.microbatches.push_back(d);
            result.slices.push_back(to_tokens(cut[d].lengths));
            a -= d;
            p = d;
        }
        finish(result);
    } else {
        // Shared cut: one path problem per partition of B; the unit cost of a slice is the sum
        // over microbatches, its cap value the max. Partitions share the best bound found.
        // Per size, built on first use: balanced partitions of a large batch use few sizes.
        std::vector<std::unique_ptr<ds::path_problem>> singles(static_cast<std::size_t>(R) + 1);
        auto single = [&](std::int64_t b) -> const ds::path_problem& {
            auto& p = singles[static_cast<std::size_t>(b)];
            if (!p) {
                const auto& t = times_for(b);
                p = std::make_unique<ds::path_problem>(tri, t.data(), t.data());
            }
            return *p;
        };
        bool have = false;
        std::vector<double> wsum(tri.size()), hmax(tri.size());
        double size_bound_cap = ds::inf; // the cap the per-size bounds are computed under
        std::vector<double> size_bound(static_cast<std::size_t>(R) + 1, -1.0);
        std::vector<double> size_bound_at(static_cast<std::size_t>(R) + 1, -1.0);
        auto bound_of = [&](std::int64_t b) {
            const auto i = static_cast<std::size_t>(b);
            if (size_bound_at[i] != size_bound_cap) {
                const auto& p = single(b);
                std::vector<double> r;
                if (size_bound_cap < ds::inf) p.suffix_capped(size_bound_cap, r);
                size_bound[i] = size_bound_cap < ds::inf ? std::max(r[0], p.lower[0]) : p.lower[0];
                size_bound_at[i] = size_bound_cap;
            }
            return size_bound[i];
        };
        const bool exhaustive = ds::partition_count(B, R, problem.max_partitions + 1) <= problem.max_partitions;
        stats.exact = exhaustive;
        auto search = exhaustive ? ds::partitions : ds::balanced_partitions;
        search(B, R, [&](const ds::size_runs& sizes) {
            // Cheap bound before building the partition's grid. A plan that can still win has
            // every unit <= thr / K, and a shared cut under a cap costs each part at least that
            // part's own least sum under the cap, so sum_j S_{thr/K}(b_j) + (K-1) * (least
            // feasible cap) bounds the partition from below. The per-size sums are refreshed
            // as thr falls; computed at a larger cap they stay valid, only weaker.
            const double external = have ? result.objective : ds::inf;
            const double thr = external == ds::inf ? ds::inf : external + ds::slack * std::fabs(external);
            if (thr < ds::inf && thr / K < 0.99 * size_bound_cap) size_bound_cap = thr / K * (1 + 1e-9);
            double lower = 0, cap_floor = 0;
            for (const auto& [d, copies] : sizes) {
                lower += static_cast<double>(copies) * bound_of(d);
                cap_floor = std::max(cap_floor, single(d).min_cap);
            }
            if (cap_floor == ds::inf || std::max(K * cap_floor, lower + (K - 1) * cap_floor) > thr) return;
            ++stats.partitions;
            const double* w = times[sizes.front().first].data();
            const double* h = w;
            if (sizes.size() > 1 || sizes.front().second > 1) {
                std::fill(wsum.begin(), wsum.end(), 0.0);
                std::fill(hmax.begin(), hmax.end(), 0.0);
                for (const auto& [d, copies] : sizes) {
                    const auto& t = times[d];
                    for (std::size_t e = 0; e < t.size(); ++e) {
                        wsum[e] += static_cast<double>(copies) * t[e];
                        hmax[e] = std::max(hmax[e], t[e]);
                    }
                }
                w = wsum.data();
                h = hmax.data();
            }
            const ds::path_problem p(tri, w, h);
            ds::sweep_result start;
            {
                std::vector<double> f, pmax;
                p.capped(ds::inf, f, &pmax);
                if (f[n] < ds::inf) start = {f[n] + (K - 1) * pmax[n], pmax[n]};
                const auto [value, cap] = p.best_uniform(K);
                if (value < start.objective) start = {value, cap};
            }
            auto combine = [&](const std::vector<std::vector<double>>& f) { return f[0][n]; };
            const auto found = ds::sweep({&p}, {0.0}, K, p.lower[0], start, external, combine, stats);
            if (found.objective == ds::inf) return;
            const auto cut = ds::canonical(p, found.cap);
            if (cut.cost == ds::inf) return;
            slicing_plan candidate;
            for (const auto& [d, copies] : sizes) candidate.microbatches.insert(candidate.microbatches.end(), copies, d);
            candidate.slices.assign(candidate.microbatches.size(), to_tokens(cut.lengths));
            finish(candidate);
            if (!have || ds::better(candidate, result)) {
                result = std::move(candidate);
                have = true;
            }
        });
        if (!have) unsolvable();
        if (!exhaustive && B <= 256) {
            slicing_problem relaxed = problem;
            relaxed.mode = cut_mode::per_microbatch;
            stats.lower_bound = plan_slices(model, relaxed).objective;
        }
    }
    stats.solve_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - clock_start).count();
    result.stats = stats;
    return result;
}

} // namespace tpipe
