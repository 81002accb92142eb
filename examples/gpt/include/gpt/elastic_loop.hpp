#pragma once
// The elastic training loop, shared by the thread and the MPI backends: per interval, ask the
// planner for the frozen count and, when it changed, the new shape; have the backend re-form
// itself; train the interval's steps; report. A backend provides
//
//   bool reshape(const elastic_shape& next);    // freeze, re-form replicas/pipelines; true if
//                                                // replica 0's weights and optimizer state came
//                                                // through bitwise and every replica holds them
//   double step(std::int64_t step);             // one training step; the mean loss
//   bool replicas_identical();                  // every replica holds replica 0's weights
//   frozen_prefix<float>::counters frozen_rows();  // rows of the frozen prefix by source
//   tpipe::elastic::cache_stats cache_stats();
//   std::vector<float> weights();
#include <algorithm>
#include <chrono>
#include <functional>

#include <tpipe/elastic/sampler.hpp>

#include "gpt/elastic.hpp"
#include "gpt/elastic_plan.hpp"
#include "gpt/frozen.hpp"

namespace gpt {

template <class Backend>
elastic_result run_elastic_loop(const window_dataset& data, const elastic_options& o, const elastic_planner& planner,
                                Backend& be, const std::function<void(const interval_report&)>& on_interval)
{
    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
    if (o.steps < 1) throw std::invalid_argument("elastic training needs at least 1 step");
    const std::int64_t every = o.freeze_every > 0 ? o.freeze_every : data.samples() / o.batch;
    elastic_result res;
    elastic_shape shape;
    const auto t_run = clock::now();
    for (int interval = 0; static_cast<std::int64_t>(interval) * every < o.steps; ++interval) {
        const auto t_plan = clock::now();
        const int frozen = planner.next_frozen(interval, shape.frozen);
        const bool replan = interval == 0 || frozen != shape.frozen;
        if (replan) {
            shape = interval == 0 ? planner.initial() : planner.replan(frozen, shape.stages);
            res.replans_kept_weights = be.reshape(shape) && res.replans_kept_weights;
        }
        interval_report rep;
        rep.plan = shape.record(interval, o.autocache);
        rep.layer_cuts = shape.layer_cuts;
        rep.replan_seconds = replan ? since(t_plan) : 0;
        rep.first_step = interval * every;
        rep.steps = std::min(every, o.steps - rep.first_step);
        const auto rows_before = be.frozen_rows();
        const auto t0 = clock::now();
        double loss_sum = 0;
        for (std::int64_t step = rep.first_step; step < rep.first_step + rep.steps; ++step) loss_sum += be.step(step);
        rep.seconds = since(t0);
        rep.mean_loss = loss_sum / static_cast<double>(rep.steps);
        rep.plan.measured_throughput = static_cast<double>(rep.steps * o.batch) / rep.seconds;
        res.replicas_identical = be.replicas_identical() && res.replicas_identical;
        rep.cache = be.cache_stats();
        const auto rows_after = be.frozen_rows();
        rep.rows_computed = rows_after.full - rows_before.full;
        rep.rows_extended = rows_after.extended - rows_before.extended;
        rep.rows_cached = rows_after.cached - rows_before.cached;
        if (on_interval) on_interval(rep);
        res.intervals.push_back(std::move(rep));
    }
    res.seconds = since(t_run);
    res.weights = be.weights();
    return res;
}

} // namespace gpt
