#pragma once
// plan_slices' outer problem (tpipe/plan/slicing_dp.hpp): the row splits of the batch it tries
// (partitions, counted and balanced), the tie-break between complete plans, and the problem's
// checks and work bound.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/slicing_problem.hpp"

namespace tpipe::detail::slicing {

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


} // namespace tpipe::detail::slicing
