#pragma once
// plan_slices' inner problem (tpipe/plan/slicing_dp.hpp): for one microbatch size, the least sum
// of unit times over token cuts with every unit under a cap -- a shortest path over token
// positions -- and the incremental sweep over caps that keeps it exact (see slicing_dp.hpp's
// file comment for the method).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/plan/slicing_problem.hpp"

namespace tpipe::detail::slicing {


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

} // namespace tpipe::detail::slicing
