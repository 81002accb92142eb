#pragma once
// Profiles a stage: times a user's `fn(b, s, c)` (one forward + backward of a unit of b rows,
// s tokens, c context tokens, on whatever engine fn uses) over a grid of points and fits the
// table model. Each point runs `warmup` untimed calls, then `repeats` timed ones (std::chrono
// steady_clock around the call); the median is kept, which ignores the odd preempted run.
// fn must return only when its work is complete (synchronise a device inside fn). A workload
// whose unit needs state that is not its own work (the keys and values of the c earlier tokens
// it attends to) prepares it in `setup(b, s, c)`, called untimed before every call of fn.
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/table_latency.hpp"

namespace tpipe {

//! A callable that runs one unit of work: fn(b, s, c). Its result, if any, is ignored.
template <class F>
concept unit_workload = std::invocable<F&, std::int64_t, std::int64_t, std::int64_t>;

//! The points to measure: every (b, s, c) with b in rows, s in tokens, c in contexts (c = 0 is
//! always measured: the table needs T0). Points with s + c > max_total_tokens are skipped
//! when max_total_tokens > 0 (a sequence never holds more tokens).
struct profile_grid {
    std::vector<std::int64_t> rows{1};
    std::vector<std::int64_t> tokens;
    std::vector<std::int64_t> contexts;
    std::int64_t max_total_tokens = 0;
};

struct profile_options {
    int warmup = 1;
    int repeats = 5;
};

//! A grid for TeraPipe's planner over sequences of seq_len tokens cut at multiples of g: rows 1,
//! rows / 2 and rows; tokens g, 2g, 4g, ... and seq_len; contexts at a quarter, half and three
//! quarters of the sequence (multiples of g); s + c never beyond seq_len.
inline profile_grid token_profile_grid(std::int64_t rows, std::int64_t seq_len, std::int64_t g)
{
    detail::require(rows >= 1 && g >= 1 && seq_len >= g,
                    "token_profile_grid: needs rows >= 1 and 1 <= g <= seq_len, got rows " + std::to_string(rows) +
                        ", g " + std::to_string(g) + ", seq_len " + std::to_string(seq_len));
    profile_grid grid;
    grid.rows = {1};
    if (rows / 2 > 1) grid.rows.push_back(rows / 2);
    if (rows > 1) grid.rows.push_back(rows);
    for (std::int64_t s = g; s < seq_len; s *= 2) grid.tokens.push_back(s);
    grid.tokens.push_back(seq_len);
    for (int q = 1; q <= 3; ++q) {
        const std::int64_t c = seq_len * q / 4 / g * g;
        if (c > 0 && (grid.contexts.empty() || grid.contexts.back() != c)) grid.contexts.push_back(c);
    }
    grid.max_total_tokens = seq_len;
    return grid;
}

//! Times every grid point, `setup` (untimed) before every call of fn; returns the samples
//! (median seconds per point).
template <unit_workload F, unit_workload S>
std::vector<latency_sample> measure(F&& fn, const profile_grid& grid, profile_options opt, S&& setup)
{
    detail::require(opt.warmup >= 0 && opt.repeats >= 1,
                    "profiler: need warmup >= 0 and repeats >= 1, got " + std::to_string(opt.warmup) + " and " +
                        std::to_string(opt.repeats));
    detail::require(!grid.rows.empty() && !grid.tokens.empty(), "profiler: the grid needs at least one b and one s");
    std::vector<std::int64_t> contexts = grid.contexts;
    contexts.push_back(0);
    std::sort(contexts.begin(), contexts.end());
    contexts.erase(std::unique(contexts.begin(), contexts.end()), contexts.end());
    std::vector<latency_sample> out;
    std::vector<double> times(static_cast<std::size_t>(opt.repeats));
    for (auto b : grid.rows)
        for (auto s : grid.tokens)
            for (auto c : contexts) {
                detail::require_unit_shape(b, s, c, "profiler grid point");
                if (grid.max_total_tokens > 0 && s + c > grid.max_total_tokens) continue;
                for (int i = 0; i < opt.warmup; ++i) {
                    setup(b, s, c);
                    fn(b, s, c);
                }
                for (auto& t : times) {
                    setup(b, s, c);
                    const auto start = std::chrono::steady_clock::now();
                    fn(b, s, c);
                    t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
                }
                auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
                std::nth_element(times.begin(), mid, times.end());
                double median = *mid;
                if (times.size() % 2 == 0) median = (median + *std::max_element(times.begin(), mid)) / 2;
                out.push_back({b, s, c, median});
            }
    return out;
}

//! Times every grid point; returns the samples (median seconds per point).
template <unit_workload F>
std::vector<latency_sample> measure(F&& fn, const profile_grid& grid, profile_options opt = {})
{
    return measure(fn, grid, opt, [](std::int64_t, std::int64_t, std::int64_t) {});
}

//! Measures the grid and fits the table model (T0 from c = 0, least-squares delta from c > 0).
template <unit_workload F>
table_latency profile(F&& fn, const profile_grid& grid, profile_options opt = {})
{
    return table_latency(measure(fn, grid, opt));
}

} // namespace tpipe
