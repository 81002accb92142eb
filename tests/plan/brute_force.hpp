#pragma once
// Exhaustive references for the slicing planner, written independently of slicing_dp.hpp:
// they enumerate every composition of the n token units (and every partition of the batch)
// and apply the documented objective and tie-break order literally.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <vector>

#include "tpipe/plan/slicing_dp.hpp"

namespace tpipe::test {

//! Every composition of n units, as lengths in units, in increasing bit-mask order.
inline std::vector<std::vector<int>> compositions(int n)
{
    std::vector<std::vector<int>> out;
    for (std::uint32_t mask = 0; mask < (1u << (n - 1)); ++mask) {
        std::vector<int> lengths;
        int last = 0;
        for (int i = 1; i < n; ++i)
            if (mask & (1u << (i - 1))) {
                lengths.push_back(i - last);
                last = i;
            }
        lengths.push_back(n - last);
        out.push_back(std::move(lengths));
    }
    return out;
}

//! Every partition of `total` rows as a non-increasing list.
inline std::vector<std::vector<std::int64_t>> row_partitions(std::int64_t total, std::int64_t largest = 0)
{
    std::vector<std::vector<std::int64_t>> out;
    std::vector<std::int64_t> cur;
    std::function<void(std::int64_t, std::int64_t)> go = [&](std::int64_t left, std::int64_t max_part) {
        if (left == 0) {
            out.push_back(cur);
            return;
        }
        for (std::int64_t d = std::min(left, max_part); d >= 1; --d) {
            cur.push_back(d);
            go(left - d, d);
            cur.pop_back();
        }
    };
    go(total, largest == 0 ? total : largest);
    return out;
}

struct brute_result {
    double objective = std::numeric_limits<double>::infinity();
    double t_max = 0;
    std::size_t units = 0;
    std::vector<std::int64_t> microbatches;
    std::vector<std::vector<std::int64_t>> slices;
};

inline bool key_less(const brute_result& a, const brute_result& b)
{
    if (a.objective != b.objective) return a.objective < b.objective;
    if (a.t_max != b.t_max) return a.t_max < b.t_max;
    if (a.units != b.units) return a.units < b.units;
    if (a.microbatches != b.microbatches) return a.microbatches < b.microbatches;
    return a.slices < b.slices;
}

//! Shared cut: every partition of B times every composition of n; full tie-break order.
template <latency_model M>
brute_result brute_shared(const M& model, int stages, std::int64_t seq_len, std::int64_t batch, std::int64_t g,
                          std::int64_t max_microbatch = 0)
{
    const int n = static_cast<int>(seq_len / g);
    brute_result best;
    bool have = false;
    for (const auto& sizes : row_partitions(batch, max_microbatch))
        for (const auto& comp : compositions(n)) {
            brute_result r;
            r.microbatches = sizes;
            std::vector<std::int64_t> tokens;
            for (int l : comp) tokens.push_back(l * g);
            r.slices.assign(sizes.size(), tokens);
            double sum = 0, mx = 0;
            for (auto b : sizes) {
                std::int64_t c = 0;
                for (auto l : tokens) {
                    const double t = model.seconds(b, l, c);
                    sum += t;
                    mx = std::max(mx, t);
                    c += l;
                }
            }
            if (sum == std::numeric_limits<double>::infinity()) continue; // cannot run
            r.objective = sum + (stages - 1) * mx;
            r.t_max = mx;
            r.units = sizes.size() * tokens.size();
            if (!have || key_less(r, best)) {
                best = r;
                have = true;
            }
        }
    return best;
}

//! Shared cut for fixed microbatch sizes: the least objective over every composition of n.
template <latency_model M>
double brute_shared_sizes(const M& model, int stages, std::int64_t seq_len, const std::vector<std::int64_t>& sizes,
                          std::int64_t g)
{
    double best = std::numeric_limits<double>::infinity();
    for (const auto& comp : compositions(static_cast<int>(seq_len / g))) {
        double sum = 0, mx = 0;
        for (auto b : sizes) {
            std::int64_t c = 0;
            for (int l : comp) {
                const double t = model.seconds(b, l * g, c);
                sum += t;
                mx = std::max(mx, t);
                c += l * g;
            }
        }
        best = std::min(best, sum + (stages - 1) * mx);
    }
    return best;
}

//! Independent cuts: T = min over caps tau (every unit time) of
//!   min over partitions of B of sum_m (least sum of a composition for b_m with max <= tau) + (K-1) tau,
//! which is the minimum over all schemes grouped by their largest unit. Reports T, the least
//! t_max reaching it, and the fewest units at that (T, t_max).
template <latency_model M>
brute_result brute_per_microbatch(const M& model, int stages, std::int64_t seq_len, std::int64_t batch,
                                  std::int64_t g)
{
    const int n = static_cast<int>(seq_len / g);
    const auto comps = compositions(n);
    struct option {
        double sum, max;
        std::size_t units;
    };
    std::vector<std::vector<option>> per_size(static_cast<std::size_t>(batch) + 1);
    std::vector<double> caps;
    for (std::int64_t b = 1; b <= batch; ++b)
        for (const auto& comp : comps) {
            double sum = 0, mx = 0;
            std::int64_t c = 0;
            for (int l : comp) {
                const double t = model.seconds(b, l * g, c);
                sum += t;
                mx = std::max(mx, t);
                c += l * g;
            }
            per_size[b].push_back({sum, mx, comp.size()});
            caps.push_back(mx);
        }
    std::sort(caps.begin(), caps.end());
    caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
    // Per size: options sorted by max, with running least (sum, units) over that prefix.
    for (std::int64_t b = 1; b <= batch; ++b) {
        auto& o = per_size[b];
        std::sort(o.begin(), o.end(), [](const option& x, const option& y) { return x.max < y.max; });
        for (std::size_t i = 1; i < o.size(); ++i)
            if (o[i - 1].sum < o[i].sum || (o[i - 1].sum == o[i].sum && o[i - 1].units < o[i].units)) {
                o[i].sum = o[i - 1].sum;
                o[i].units = o[i - 1].units;
            }
    }
    brute_result best;
    const auto parts = row_partitions(batch);
    for (double cap : caps) {
        std::vector<std::pair<double, std::size_t>> least(static_cast<std::size_t>(batch) + 1,
                                                          {std::numeric_limits<double>::infinity(), 0});
        for (std::int64_t b = 1; b <= batch; ++b) {
            const auto& o = per_size[b];
            auto it = std::upper_bound(o.begin(), o.end(), cap, [](double c, const option& x) { return c < x.max; });
            if (it != o.begin()) least[b] = {std::prev(it)->sum, std::prev(it)->units};
        }
        for (const auto& sizes : parts) {
            double sum = 0;
            std::size_t units = 0;
            for (auto b : sizes) {
                sum += least[b].first;
                units += least[b].second;
            }
            brute_result r;
            r.objective = sum + (stages - 1) * cap;
            r.t_max = cap;
            r.units = units;
            if (r.objective < best.objective ||
                (r.objective == best.objective && (r.t_max < best.t_max || (r.t_max == best.t_max && r.units < best.units))))
                best = r;
        }
    }
    return best;
}

//! Shared cut, exact by plain cap enumeration (no pruning, no incremental labels): for every
//! partition of B and every distinct unit-time cap, a full O(n^2) least-sum DP. For inputs too
//! large to enumerate compositions.
template <latency_model M>
double cap_enumeration_shared(const M& model, int stages, std::int64_t seq_len, std::int64_t batch, std::int64_t g)
{
    const int n = static_cast<int>(seq_len / g);
    const double inf = std::numeric_limits<double>::infinity();
    double best = inf;
    for (const auto& sizes : row_partitions(batch)) {
        // cost (sum over microbatches) and cap value (max) of slice [i, i+s)
        std::vector<std::vector<double>> w(n), h(n);
        std::vector<double> caps;
        for (int i = 0; i < n; ++i)
            for (int s = 1; s <= n - i; ++s) {
                double sum = 0, mx = 0;
                for (auto b : sizes) {
                    const double t = model.seconds(b, s * g, i * g);
                    sum += t;
                    mx = std::max(mx, t);
                }
                w[i].push_back(sum);
                h[i].push_back(mx);
                caps.push_back(mx);
            }
        std::sort(caps.begin(), caps.end());
        caps.erase(std::unique(caps.begin(), caps.end()), caps.end());
        for (double cap : caps) {
            if (cap == inf) break;
            std::vector<double> f(n + 1, inf);
            f[0] = 0;
            for (int i = 0; i < n; ++i)
                for (int s = 1; s <= n - i; ++s)
                    if (h[i][s - 1] <= cap) f[i + s] = std::min(f[i + s], f[i] + w[i][s - 1]);
            best = std::min(best, f[n] + (stages - 1) * cap);
        }
    }
    return best;
}

} // namespace tpipe::test
