#pragma once
// Our re-implementation of the official TeraPipe planner's algorithm (zhuohan123/terapipe,
// latency_model.py `planning` with the batch extension of PR #41), written from its
// description in docs/papers.md sections 1.4-1.6 to compare speed and results:
//   * the latency grid covers every (b, s, c) with b = 1..B, s = 1..n units, c = 0..n units,
//     including the impossible s + c > n entries; its sorted distinct values are the caps;
//   * caps are tried in increasing order; the loop stops when K * cap > best, and skips a cap
//     within `epsilon` seconds of the last evaluated one (1e-5 s in the official code);
//   * for each cap, per microbatch size b: f[j] = min over k = 1..j (strict <, so the shortest
//     last slice wins ties) of f[j-k] + t(b, k, j-k) over t <= cap, tracking the path maximum;
//     then a knapsack over sizes; objective = sum + (K-1) * path maximum.
// Its cost is O(B * n^2) per evaluated cap over O(B * n^2) caps.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "tpipe/plan/latency_model.hpp"

namespace tpipe::bench {

struct reference_result {
    double objective = std::numeric_limits<double>::infinity();
    std::vector<std::int64_t> microbatches;          //!< last group first, as the official code lists them
    std::vector<std::vector<std::int64_t>> slices;   //!< tokens, first token first
    std::size_t caps_evaluated = 0;
};

template <latency_model M>
reference_result reference_terapipe_dp(const M& model, int stages, std::int64_t seq_len, std::int64_t batch,
                                       std::int64_t granularity, double epsilon = 1e-5)
{
    constexpr double inf = std::numeric_limits<double>::infinity();
    const int n = static_cast<int>(seq_len / granularity);
    const int B = static_cast<int>(batch);
    auto at = [&](int b, int s, int c) {
        return (static_cast<std::size_t>(b - 1) * static_cast<std::size_t>(n + 1) + static_cast<std::size_t>(s)) *
                   static_cast<std::size_t>(n + 1) +
               static_cast<std::size_t>(c);
    };
    std::vector<double> grid(static_cast<std::size_t>(B) * (n + 1) * (n + 1), inf); // s = 0 stays +inf
    for (int b = 1; b <= B; ++b)
        for (int s = 1; s <= n; ++s)
            for (int c = 0; c <= n; ++c) grid[at(b, s, c)] = model.seconds(b, s * granularity, c * granularity);
    std::vector<double> caps = grid;
    std::sort(caps.begin(), caps.end());
    caps.erase(std::unique(caps.begin(), caps.end()), caps.end());

    reference_result best;
    std::vector<std::vector<double>> f(B + 1, std::vector<double>(n + 1)), fmax = f;
    std::vector<std::vector<int>> last(B + 1, std::vector<int>(n + 1, 0));
    std::vector<double> g(B + 1), gmax(B + 1);
    std::vector<int> gpick(B + 1);
    double last_cap = -inf;
    for (double cap : caps) {
        if (cap == inf || cap * stages > best.objective) break;
        if (cap - last_cap < epsilon) continue;
        last_cap = cap;
        ++best.caps_evaluated;
        for (int b = 1; b <= B; ++b) {
            f[b][0] = 0;
            fmax[b][0] = 0;
            for (int j = 1; j <= n; ++j) {
                f[b][j] = inf;
                for (int k = 1; k <= j; ++k) {
                    const double t = grid[at(b, k, j - k)];
                    if (t > cap) continue;
                    const double v = f[b][j - k] + t;
                    if (v < f[b][j]) {
                        f[b][j] = v;
                        fmax[b][j] = std::max(fmax[b][j - k], t);
                        last[b][j] = k;
                    }
                }
            }
        }
        g[0] = 0;
        gmax[0] = 0;
        for (int a = 1; a <= B; ++a) {
            g[a] = inf;
            for (int b = 1; b <= a; ++b) {
                const double v = g[a - b] + f[b][n];
                if (v < g[a]) {
                    g[a] = v;
                    gmax[a] = std::max(gmax[a - b], fmax[b][n]);
                    gpick[a] = b;
                }
            }
        }
        const double objective = g[B] + (stages - 1) * gmax[B];
        if (objective < best.objective) {
            best.objective = objective;
            best.microbatches.clear();
            best.slices.clear();
            for (int a = B; a > 0; a -= gpick[a]) {
                const int b = gpick[a];
                std::vector<std::int64_t> lengths;
                for (int j = n; j > 0; j -= last[b][j]) lengths.push_back(last[b][j] * granularity);
                std::reverse(lengths.begin(), lengths.end());
                best.microbatches.push_back(b);
                best.slices.push_back(std::move(lengths));
            }
        }
    }
    return best;
}

} // namespace tpipe::bench
