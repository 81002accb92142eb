#pragma once
// The elastic driver's loop, shared by every backend (replicas on threads, processes under MPI):
// per interval, ask the planner for the frozen count and, when it changed, the new shape; have
// the backend re-form itself; train the interval's steps; report. A backend:
//
//   bool reshape(const interval_shape&);   // freeze, re-form replicas/pipelines; true if replica
//                                          // 0's trainable state came through bitwise to all
//   double step(std::int64_t step);        // one training step; the mean loss
//   bool replicas_identical();             // every replica holds replica 0's trainable state
//   frozen_counters frozen_rows();         // frozen-prefix rows by source, so far
//   cache_stats cache_stats();
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/elastic/frozen_outputs.hpp"
#include "tpipe/elastic/interval_forecast.hpp"
#include "tpipe/elastic/shape_planner.hpp"

namespace tpipe::elastic {

template <class B>
concept elastic_backend = requires(B& b, const interval_shape& s, std::int64_t step) {
    { b.reshape(s) } -> std::convertible_to<bool>;
    { b.step(step) } -> std::convertible_to<double>;
    { b.replicas_identical() } -> std::convertible_to<bool>;
    { b.frozen_rows() } -> std::convertible_to<frozen_counters>;
    { b.cache_stats() } -> std::convertible_to<cache_stats>;
};

//! Trains o.steps steps of o.batch samples over `samples` samples per epoch on `be`, from the
//! start or from `from` (a resumed run). `on_interval` (optional) sees each interval when it ends.
//! Whether two models' trainable states hold the same bytes.
inline bool same_state(const std::vector<std::span<std::byte>>& a, const std::vector<std::span<std::byte>>& b)
{
    return std::equal(a.begin(), a.end(), b.begin(), b.end(),
                      [](auto x, auto y) { return std::equal(x.begin(), x.end(), y.begin(), y.end()); });
}

//! A model's trainable state as one byte vector (a backend compares it before and after a re-plan).
inline std::vector<std::byte> flatten_state(const std::vector<std::span<std::byte>>& state)
{
    std::size_t n = 0;
    for (auto s : state) n += s.size();
    std::vector<std::byte> all(n);  // sized once: GCC 12 misreads a growing insert of spans (free-nonheap-object)
    auto at = all.begin();
    for (auto s : state) at = std::copy(s.begin(), s.end(), at);
    return all;
}

//! The 10th and 90th percentiles of a run's step times (how stable a short interval's figure is).
inline step_spread spread_of(std::vector<double> seconds)
{
    if (seconds.empty()) return {};
    std::sort(seconds.begin(), seconds.end());
    const auto at = [&](double q) { return seconds[static_cast<std::size_t>(q * static_cast<double>(seconds.size() - 1) + 0.5)]; };
    return {at(0.1), at(0.9)};
}

template <elastic_backend Backend>
run_report run_intervals(std::int64_t samples, const driver_options& o, const shape_planner& planner, Backend& be,
                         const std::function<void(const interval_report&)>& on_interval = {},
                         const std::optional<resume_point>& from = {})
{
    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
    detail::require(o.steps >= 1, "elastic training needs at least 1 step, got " + std::to_string(o.steps));
    const std::int64_t every = o.freeze_every > 0 ? o.freeze_every : samples / o.batch;
    detail::require(every >= 1, "elastic training: " + std::to_string(samples) + " samples make no step of " +
                                    std::to_string(o.batch));
    const std::int64_t start = from ? from->steps_done : 0;
    detail::require(start >= 0 && start < o.steps, "elastic training resumed after step " + std::to_string(start) +
                                                       " of " + std::to_string(o.steps) + ": nothing is left to train");
    run_report res;
    interval_shape shape;
    cache_forecast forecast(samples, o.batch, o.seed, o.autocache);
    const auto t_run = clock::now();
    const int first_interval = static_cast<int>(start / every);
    for (int interval = first_interval; static_cast<std::int64_t>(interval) * every < o.steps; ++interval) {
        const std::int64_t first_step = std::max(start, interval * every);
        // Asked before the interval's re-plan: a run stopped here keeps the frozen state its
        // last step ran with (what a checkpoint saved at the stop records).
        if (o.stop && o.stop(first_step)) {
            res.stopped_after = first_step;
            break;
        }
        const auto t_plan = clock::now();
        // Resumed: the first interval continues the saved one, or (resumed at its boundary) is
        // the next interval after it, which keeps the saved plan unless it freezes more.
        const bool resuming = from && interval == first_interval;
        const int before = resuming ? from->plan.frozen : shape.frozen;
        const int frozen = resuming && first_step > interval * every ? before : planner.next_frozen(interval, before);
        const bool replan = interval == first_interval || frozen != shape.frozen;
        if (replan) {
            if (resuming) shape = planner.resume(from->plan, frozen);
            else shape = interval == 0 ? planner.initial() : planner.replan(frozen, shape.stages);
            res.replans_kept_weights = be.reshape(shape) && res.replans_kept_weights;
        }
        interval_report rep;
        rep.plan = shape.record(interval, o.autocache);
        rep.stage_cuts = shape.stage_cuts;
        rep.units = shape.units;
        rep.replan_seconds = replan ? since(t_plan) : 0;
        rep.first_step = first_step;
        rep.steps = std::min((interval + 1) * every, o.steps) - first_step;
        // The interval's forecast: its steps at the shape's pace, the frozen-prefix rows AutoCache
        // does not hold yet (the replicas share them), one optimizer step and, with replicas, one
        // gradient all-reduce per step. Without the
        // cache and without token slices the pace prices the prefix already (unit_latency puts
        // the frozen units' forward into stage 0): counted, not priced twice.
        const frozen_work fw = forecast.interval(first_step, rep.steps, shape.frozen, planner.measured());
        rep.predicted_rows = fw.rows;
        const bool prefix_in_pace = !o.autocache && !o.slicing;
        const std::int64_t planned = rep.steps;
        rep.predicted_seconds = static_cast<double>(rep.steps) * (static_cast<double>(o.batch) / shape.predicted_throughput +
                                                                  update_seconds(planner.measured(), shape.frozen) +
                                                                  reduce_seconds(planner.measured(), shape.stage_cuts, shape.replicas)) +
                                (prefix_in_pace ? 0.0 : fw.seconds / shape.replicas);
        const frozen_counters rows_before = be.frozen_rows();
        const auto t0 = clock::now();
        double loss_sum = 0;
        std::int64_t done = 0;
        std::vector<double> step_seconds;
        step_seconds.reserve(static_cast<std::size_t>(rep.steps));
        for (std::int64_t step = rep.first_step; step < rep.first_step + rep.steps; ++step, ++done) {
            if (step > rep.first_step && o.stop && o.stop(step)) {  // the first step's was asked above
                res.stopped_after = step;
                break;
            }
            const auto t_step = clock::now();
            loss_sum += be.step(step);
            if (o.after_step) o.after_step(step + 1, rep.plan);
            step_seconds.push_back(since(t_step));
        }
        rep.steps = done;
        rep.seconds = since(t0);
        rep.mean_loss = loss_sum / static_cast<double>(rep.steps);
        rep.plan.measured_throughput = static_cast<double>(rep.steps * o.batch) / rep.seconds;
        rep.spread = spread_of(step_seconds);
        rep.plan.predicted_throughput = static_cast<double>(planned * o.batch) / rep.predicted_seconds;
        res.replicas_identical = be.replicas_identical() && res.replicas_identical;
        rep.cache = be.cache_stats();
        const frozen_counters rows_after = be.frozen_rows();
        rep.rows_computed = rows_after.full - rows_before.full;
        rep.rows_extended = rows_after.extended - rows_before.extended;
        rep.rows_cached = rows_after.cached - rows_before.cached;
        if (on_interval) on_interval(rep);
        res.intervals.push_back(std::move(rep));
        if (res.stopped_after >= 0) break;
    }
    res.seconds = since(t_run);
    return res;
}

} // namespace tpipe::elastic
