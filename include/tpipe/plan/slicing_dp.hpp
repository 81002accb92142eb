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
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <queue>
#include <utility>
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

namespace detail::slicing {

inline constexpr double inf = std::numeric_limits<double>::infinity();
inline constexpr double slack = 1e-10; // relative; pruning keeps anything within it of the best

//! Row-major upper triangle: row i (context i units) holds slices s = 1..n-i.
struct triangle {
    int n = 0;
    std::vector<std::size_t> offset; // n + 1 entries
    explicit triangle(int n_units) : n(n_units), offset(static_cast<std::size_t>(n_units) + 1, 0)
    {
        for (int i = 0; i < n; ++i) offset[i + 1] = offset[i] + static_cast<std::size_t>(n - i);
    }
    std::size_t size() const { return offset[n]; }
};

//! t(b, s*G, i*G) for every slice of n units, checked for NaN and negative values.
template <latency_model M>
std::vector<double> unit_times(const M& model, const triangle& tri, std::int64_t rows, std::int64_t g)
{
    std::vector<double> t(tri.size());
    for (int i = 0; i < tri.n; ++i)
        for (int s = 1; s <= tri.n - i; ++s) {
            const std::int64_t len = s * g, ctx = i * g;
            t[tri.offset[i] + s - 1] = checked_time(static_cast<double>(model.seconds(rows, len, ctx)), rows, len, ctx);
        }
    return t;
}

//! One shortest-path problem over token positions 0..n: edge (i, i+s) costs w and must
//! satisfy h <= cap (h is w for one microbatch, the max over microbatches for a shared cut).
struct path_problem {
    const triangle* tri = nullptr;
    const double* w = nullptr;
    const double* h = nullptr;
    std::vector<unsigned char> monotone; //!< per context: h non-decreasing in s
    std::vector<double> lower;           //!< uncapped least cost from position k to n
    double min_cap = inf;                //!< least cap that admits a complete cut

    path_problem(const triangle& t, const double* cost, const double* cap_value) : tri(&t), w(cost), h(cap_value)
    {
        const int n = t.n;
        monotone.assign(n, 1);
        for (int i = 0; i < n; ++i) {
            const double* hr = h + t.offset[i];
            for (int s = 1; s < n - i; ++s)
                if (hr[s] < hr[s - 1]) {
                    monotone[i] = 0;
                    break;
                }
        }
        lower.assign(n + 1, inf);
        lower[n] = 0;
        for (int i = n - 1; i >= 0; --i) {
            const double *wr = w + t.offset[i], *hr = h + t.offset[i];
            double best = inf;
            for (int s = 1; s <= n - i; ++s)
                if (hr[s - 1] < inf) best = std::min(best, wr[s - 1] + lower[i + s]);
            lower[i] = best;
        }
        std::vector<double> bottleneck(n + 1, inf);
        bottleneck[0] = 0;
        for (int i = 0; i < n; ++i) {
            if (bottleneck[i] == inf) continue;
            const double* hr = h + t.offset[i];
            for (int s = 1; s <= n - i; ++s)
                bottleneck[i + s] = std::min(bottleneck[i + s], std::max(bottleneck[i], hr[s - 1]));
        }
        min_cap = bottleneck[n];
    }

    //! The best uniform cut (m slices of floor or ceil n/m units, longer first) as a feasible
    //! (sum + (K-1) max, max): a tight starting bound for the sweep at O(n^2) lookups.
    std::pair<double, double> best_uniform(int stages) const
    {
        const int n = tri->n;
        double best = inf, best_cap = inf;
        for (int m = 1; m <= n; ++m) {
            double sum = 0, mx = 0;
            for (int i = 0, pos = 0; i < m; ++i) {
                const int len = n / m + (i < n % m ? 1 : 0);
                const std::size_t e = tri->offset[pos] + len - 1;
                sum += w[e];
                mx = std::max(mx, h[e]);
                pos += len;
            }
            if (mx == inf) continue;
            const double value = sum + (stages - 1) * mx;
            if (value < best) {
                best = value;
                best_cap = mx;
            }
        }
        return {best, best_cap};
    }

    //! Least cost from every position to n with every slice's h <= cap (a suffix DP).
    void suffix_capped(double cap, std::vector<double>& r) const
    {
        const int n = tri->n;
        r.assign(n + 1, inf);
        r[n] = 0;
        for (int i = n - 1; i >= 0; --i) {
            const double *wr = w + tri->offset[i], *hr = h + tri->offset[i];
            double best = inf;
            for (int s = 1; s <= n - i; ++s) {
                if (hr[s - 1] > cap) {
                    if (monotone[i]) break;
                    continue;
                }
                best = std::min(best, wr[s - 1] + r[i + s]);
            }
            r[i] = best;
        }
    }

    //! Least cost to every position with every slice's h <= cap; `path_max` (if given) gets the
    //! largest h on the chosen path to each position.
    void capped(double cap, std::vector<double>& f, std::vector<double>* path_max = nullptr) const
    {
        const int n = tri->n;
        f.assign(n + 1, inf);
        f[0] = 0;
        if (path_max) path_max->assign(n + 1, 0);
        for (int i = 0; i < n; ++i) {
            if (f[i] == inf) continue;
            const double *wr = w + tri->offset[i], *hr = h + tri->offset[i];
            for (int s = 1; s <= n - i; ++s) {
                if (hr[s - 1] > cap) {
                    if (monotone[i]) break;
                    continue;
                }
                const double v = f[i] + wr[s - 1];
                if (v < f[i + s]) {
                    f[i + s] = v;
                    if (path_max) (*path_max)[i + s] = std::max((*path_max)[i], hr[s - 1]);
                }
            }
        }
    }
};

//! The canonical cut under a cap: least cost, then fewest slices, then lexicographically
//! smallest lengths (in units). Cost is summed from the last slice backwards.
struct canonical_cut {
    double cost = inf;
    int units = 0;
    std::vector<int> lengths;
};

inline canonical_cut canonical(const path_problem& p, double cap)
{
    const int n = p.tri->n;
    std::vector<double> gc(n + 1, inf);
    std::vector<int> gu(n + 1, 0);
    gc[n] = 0;
    auto scan = [&](int i, auto&& visit) {
        const double *wr = p.w + p.tri->offset[i], *hr = p.h + p.tri->offset[i];
        for (int s = 1; s <= n - i; ++s) {
            if (hr[s - 1] > cap) {
                if (p.monotone[i]) break;
                continue;
            }
            if (gc[i + s] == inf) continue;
            if (visit(s, wr[s - 1] + gc[i + s], gu[i + s] + 1)) return;
        }
    };
    for (int i = n - 1; i >= 0; --i)
        scan(i, [&](int, double c, int u) {
            if (c < gc[i] || (c == gc[i] && u < gu[i])) {
                gc[i] = c;
                gu[i] = u;
            }
            return false;
        });
    canonical_cut out;
    if (gc[0] == inf) return out;
    out.cost = gc[0];
    out.units = gu[0];
    for (int i = 0; i < n;) {
        int take = 0;
        scan(i, [&](int s, double c, int u) {
            if (c == gc[i] && u == gu[i]) {
                take = s;
                return true;
            }
            return false;
        });
        out.lengths.push_back(take);
        i += take;
    }
    return out;
}

struct sweep_result {
    double objective = inf;
    double cap = inf;
};

//! The incremental cap sweep over several path problems that share one cap.
//! `rest[p]` lower-bounds what the other microbatches add to a solution that uses problem p;
//! `lower_sum` lower-bounds the whole sum; `combine(f)` turns the labels at position n into the
//! least total sum. `start` is a known feasible (objective, cap), `external` a bound from
//! elsewhere (other partitions): nothing worse than it, beyond the slack, is pursued.
template <class Combine>
sweep_result sweep(const std::vector<const path_problem*>& problems, const std::vector<double>& rest, int stages,
                   double lower_sum, sweep_result start, double external, Combine&& combine, slicing_stats& stats)
{
    const int n = problems.front()->tri->n;
    const double k1 = stages - 1;
    double cap0 = inf;
    for (const auto* p : problems) cap0 = std::min(cap0, p->min_cap);
    if (cap0 == inf) return start;

    std::vector<std::vector<double>> f(problems.size());
    for (std::size_t q = 0; q < problems.size(); ++q) problems[q]->capped(cap0, f[q]);
    sweep_result best = start;
    auto consider = [&](double cap) {
        const double value = combine(f) + k1 * cap;
        if (value < best.objective || (value == best.objective && cap < best.cap)) best = {value, cap};
    };
    consider(cap0);
    auto threshold = [&] {
        const double b = std::min(best.objective, external);
        return b == inf ? inf : b + slack * std::fabs(b);
    };

    // Every cap still worth trying lies at or below cap_hi (beyond it even the uncapped least
    // sum loses), and suffix costs only fall as the cap grows, so the least suffix cost under
    // cap_hi bounds every completion the sweep can still use: far tighter than the uncapped
    // bound, and valid because the best objective (hence cap_hi) only decreases.
    std::vector<std::vector<double>> bound(problems.size());
    {
        const double thr0 = threshold();
        double cap_hi = inf;
        if (thr0 < inf) {
            cap_hi = thr0 / stages;
            if (k1 > 0) cap_hi = std::min(cap_hi, (thr0 - lower_sum) / k1);
            cap_hi *= 1 + 1e-9; // rounding must never exclude a useful cap
        }
        std::vector<std::vector<double>> ends(problems.size(), std::vector<double>(n + 1, inf));
        for (std::size_t q = 0; q < problems.size(); ++q) {
            if (cap_hi < inf)
                problems[q]->suffix_capped(cap_hi, bound[q]);
            else
                bound[q] = problems[q]->lower;
            ends[q][n] = bound[q][0];
        }
        lower_sum = std::max(lower_sum, combine(ends));
    }
    auto hopeless = [&](double cap) {
        return std::max(stages * cap, lower_sum + k1 * cap) > threshold();
    };

    struct event {
        double h;
        int problem, context, length;
    };
    std::vector<event> events;
    for (std::size_t q = 0; q < problems.size(); ++q) {
        const auto& p = *problems[q];
        for (int i = 0; i < n; ++i) {
            const double* hr = p.h + p.tri->offset[i];
            for (int s = 1; s <= n - i; ++s) {
                const double h = hr[s - 1];
                if (h <= cap0 || h == inf) continue;
                if (hopeless(h)) {
                    if (p.monotone[i]) break;
                    continue;
                }
                events.push_back({h, static_cast<int>(q), i, s});
            }
        }
    }
    std::sort(events.begin(), events.end(), [](const event& a, const event& b) {
        if (a.h != b.h) return a.h < b.h;
        if (a.problem != b.problem) return a.problem < b.problem;
        if (a.context != b.context) return a.context < b.context;
        return a.length < b.length;
    });
    stats.caps_considered += events.size();

    using min_heap = std::priority_queue<int, std::vector<int>, std::greater<int>>;
    std::vector<min_heap> pending(problems.size());
    std::vector<std::vector<unsigned char>> queued(problems.size(), std::vector<unsigned char>(n + 1, 0));
    std::vector<double> budget(problems.size()); // a label k is useful iff f[k] + bound[k] < budget
    std::vector<double> before(problems.size());

    auto relax = [&](std::size_t q, int from, int to, double cost) {
        ++stats.relaxations;
        const double v = f[q][from] + cost;
        if (v < f[q][to] && v + bound[q][to] < budget[q]) {
            f[q][to] = v;
            if (!queued[q][to] && to < n) {
                queued[q][to] = 1;
                pending[q].push(to);
            }
            return true;
        }
        return false;
    };

    // Distinct caps, as [first event, end) ranges.
    std::vector<std::size_t> group{0};
    for (std::size_t e = 1; e <= events.size(); ++e)
        if (e == events.size() || events[e].h != events[e - 1].h) group.push_back(e);
    const std::size_t groups = group.size() - 1;

    // Caps are taken in chunks: insert every edge of caps a..b, propagate once under cap b.
    // The chunk's objective is at least S_b + (K-1) * cap_a (S falls as the cap grows), so
    // when that already loses, no cap inside can win and the chunk is kept as one step;
    // otherwise the labels are restored and the chunk halved, down to single caps, which
    // are evaluated exactly. Chunks double after every success, so long runs of hopeless
    // caps cost one propagation wave instead of one per cap.
    std::vector<std::vector<double>> saved(problems.size());
    std::size_t chunk = 1;
    for (std::size_t gi = 0; gi < groups;) {
        const double cap_a = events[group[gi]].h;
        if (hopeless(cap_a)) break;
        const std::size_t gj = std::min(groups, gi + chunk);
        const double cap_b = events[group[gj] - 1].h;
        const double thr = threshold();
        for (std::size_t q = 0; q < problems.size(); ++q) budget[q] = thr - rest[q] - k1 * cap_a;
        for (std::size_t q = 0; q < problems.size(); ++q) before[q] = f[q][n];
        if (chunk > 1)
            for (std::size_t q = 0; q < problems.size(); ++q) saved[q] = f[q];
        for (std::size_t e = group[gi]; e < group[gj]; ++e) {
            const auto& ev = events[e];
            const auto q = static_cast<std::size_t>(ev.problem);
            if (f[q][ev.context] == inf) continue;
            relax(q, ev.context, ev.context + ev.length,
                  problems[q]->w[problems[q]->tri->offset[ev.context] + ev.length - 1]);
        }
        bool changed = false;
        for (std::size_t q = 0; q < problems.size(); ++q) {
            const auto& p = *problems[q];
            auto& heap = pending[q];
            while (!heap.empty()) {
                const int k = heap.top();
                heap.pop();
                queued[q][k] = 0;
                if (!(f[q][k] + bound[q][k] < budget[q])) continue;
                const double *wr = p.w + p.tri->offset[k], *hr = p.h + p.tri->offset[k];
                for (int s = 1; s <= n - k; ++s) {
                    if (hr[s - 1] > cap_b) {
                        if (p.monotone[k]) break;
                        continue;
                    }
                    relax(q, k, k + s, wr[s - 1]);
                }
            }
            changed = changed || f[q][n] != before[q];
        }
        if (chunk == 1) {
            ++stats.caps_evaluated;
            if (changed) consider(cap_a);
            gi = gj;
            chunk = 2;
        } else if (!changed || combine(f) + k1 * cap_a > thr) {
            stats.caps_evaluated += gj - gi;
            gi = gj;
            chunk *= 2;
        } else {
            for (std::size_t q = 0; q < problems.size(); ++q) f[q].swap(saved[q]);
            chunk /= 2;
        }
    }
    return best;
}

//! Partitions of `total` into parts <= `largest`, as non-increasing lists, from the greedy
//! one ([largest, largest, ..., rest]) down to all ones. Iterative: a million rows of parts
//! of one must not recurse a million deep.
//! A partition as runs of equal parts, largest first: (part, count).
using size_runs = std::vector<std::pair<std::int64_t, std::int64_t>>;

inline void partitions(std::int64_t total, std::int64_t largest, const std::function<void(const size_runs&)>& visit)
{
    std::vector<std::int64_t> a;
    size_runs runs;
    auto fill = [&](std::int64_t rest, std::int64_t cap) {
        for (; rest > 0; rest -= std::min(cap, rest)) a.push_back(std::min(cap, rest));
    };
    fill(total, largest);
    for (;;) {
        runs.clear();
        for (auto part : a)
            if (!runs.empty() && runs.back().first == part) ++runs.back().second;
            else runs.emplace_back(part, 1);
        visit(runs);
        std::int64_t rest = 0;
        while (!a.empty() && a.back() == 1) {
            a.pop_back();
            ++rest;
        }
        if (a.empty()) return;
        const std::int64_t part = --a.back();
        fill(rest + 1, part);
    }
}

//! The number of partitions of `total` into parts <= `largest`, saturated at `limit`.
inline std::size_t partition_count(std::int64_t total, std::int64_t largest, std::size_t limit)
{
    largest = std::min(largest, total);
    // Partitions of min(total, largest) padded with ones are distinct, so there are at least
    // p(64) = 1741630 of them.
    if (largest >= 64 && limit <= 1741630) return limit;
    std::vector<std::size_t> ways(static_cast<std::size_t>(total) + 1, 0);
    ways[0] = 1;
    for (std::int64_t part = 1; part <= largest; ++part)
        for (std::int64_t a = part; a <= total; ++a)
            ways[a] = std::min(limit, ways[a] + ways[a - part]);
    return ways[total];
}

//! The balanced partitions of `total` into parts <= `largest`: for every count m, B mod m parts
//! of ceil(B/m) rows and the rest of floor(B/m), largest first.
inline void balanced_partitions(std::int64_t total, std::int64_t largest, const std::function<void(const size_runs&)>& visit)
{
    size_runs runs;
    for (std::int64_t m = (total + largest - 1) / largest; m <= total; ++m) {
        const std::int64_t q = total / m, r = total % m;
        runs.clear();
        if (r > 0) runs.emplace_back(q + 1, r);
        runs.emplace_back(q, m - r);
        visit(runs);
    }
}

//! Lexicographic comparison of two complete plans by the documented tie-break order.
inline bool better(const slicing_plan& a, const slicing_plan& b)
{
    if (a.objective != b.objective) return a.objective < b.objective;
    if (a.t_max != b.t_max) return a.t_max < b.t_max;
    if (a.units() != b.units()) return a.units() < b.units();
    if (a.microbatches != b.microbatches) return a.microbatches < b.microbatches;
    return a.slices < b.slices;
}

//! The most (microbatch size, slice) unit times one plan may price.
inline constexpr std::int64_t max_unit_times = std::int64_t{1} << 26;

inline void validate(const slicing_problem& pr)
{
    require(pr.stages >= 1, "slicing: stages K must be >= 1, got " + std::to_string(pr.stages));
    require(pr.granularity >= 1, "slicing: granularity G must be >= 1 token, got " + std::to_string(pr.granularity));
    require(pr.seq_len >= 1, "slicing: sequence length L must be >= 1, got " + std::to_string(pr.seq_len));
    require(pr.seq_len % pr.granularity == 0,
            "slicing: sequence length " + std::to_string(pr.seq_len) + " is not a multiple of the granularity " +
                std::to_string(pr.granularity) + "; choose G dividing L");
    require(pr.seq_len / pr.granularity <= 1 << 16,
            "slicing: " + std::to_string(pr.seq_len / pr.granularity) +
                " token units is too many for the exact planner (at most 65536); use a coarser granularity");
    require(pr.batch >= 1, "slicing: batch B must be >= 1 row, got " + std::to_string(pr.batch));
    require(pr.batch <= 1 << 16, "slicing: batch B=" + std::to_string(pr.batch) +
                                     " rows is more than one pipeline iteration plans (at most 65536); split it "
                                     "over data-parallel replicas or iterations");
    // The per-microbatch combination is a knapsack over sizes and a canonical pass O(B^3).
    require(pr.mode != cut_mode::per_microbatch || pr.batch <= 512,
            "slicing: per-microbatch cuts plan at most 512 rows (their combination is O(B^3)), got B=" +
                std::to_string(pr.batch) + "; use shared cuts");
    require(pr.max_microbatch >= 0, "slicing: max_microbatch must be >= 1 row (or 0 for the whole batch), got " +
                                        std::to_string(pr.max_microbatch));
    // The planner prices every slice [i, j) of the n token units for each microbatch size it may
    // use: memory and time grow as sizes * n(n+1)/2, so refuse what would need gigabytes.
    const double n = static_cast<double>(pr.seq_len / pr.granularity);
    const double sizes = static_cast<double>(pr.max_microbatch == 0 ? pr.batch : std::min(pr.batch, pr.max_microbatch));
    const double unit_times = sizes * n * (n + 1) / 2;
    require(unit_times <= max_unit_times,
            "slicing: " + std::to_string(static_cast<std::int64_t>(n)) + " token units and up to " +
                std::to_string(static_cast<std::int64_t>(sizes)) + " microbatch sizes need " +
                std::to_string(static_cast<std::int64_t>(unit_times)) + " unit times (sizes x n(n+1)/2); the planner "
                "prices at most " + std::to_string(max_unit_times) + " (about 1.5 GiB, under a minute): use a coarser "
                "granularity G, or a smaller batch or max_microbatch");
}

} // namespace detail::slicing

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
