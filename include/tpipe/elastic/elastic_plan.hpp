#pragma once
// The elastic plan over a run, simulated: at the start of every epoch AutoFreeze picks F; on a
// change AutoPipe re-partitions and shrinks the pipeline and AutoDP turns freed devices into
// replicas; AutoCache serves the frozen prefix's output from host memory once reading it is
// cheaper than recomputing it (written in the first such epoch, extended incrementally as F
// grows). Every epoch is priced by tpipe's simulator through elastic_latency. Components can
// be switched off for ablations; without AutoPipe the pipeline and its partition stay fixed,
// so neither AutoDP (no freed devices) nor AutoCache (the frozen units are spread over the
// stages) applies.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/autopipe.hpp"
#include "tpipe/elastic/elastic_latency.hpp"
#include "tpipe/elastic/elastic_model.hpp"
#include "tpipe/elastic/freeze.hpp"
#include "tpipe/elastic/replan.hpp"

namespace tpipe::elastic {

struct elastic_components {
    bool freeze = true;
    bool autopipe = true;
    bool autodp = true;
    bool autocache = true;
    friend bool operator==(const elastic_components&, const elastic_components&) = default;
};

struct elastic_options {
    int devices = 1;              //!< N
    int initial_stages = 1;       //!< K0 (divides N)
    int epochs = 1;
    int min_stages = 1;
    //! Frozen cost factor in partitioning and the halving test: 0 as the released code, 1/6 as
    //! the paper; empty (the default): the frozen prefix's own seconds this epoch (forward only,
    //! or AutoCache's cost) over its training seconds, so stage 0 is priced as it runs.
    std::optional<double> lambda;
    bool strict = false;          //!< halve while < (instead of <=) the starting slowest stage
    int max_frozen = -1;          //!< -1: all L blocks may freeze (the head never does)
    int microbatch_factor = 6;    //!< microbatch counts tried: K .. factor K
    pipeline_schedule schedule = pipeline_schedule::gpipe;
    elastic_components use;
};

//! How an epoch obtains the frozen prefix's output.
enum class cache_use { off, write, read, extend };
constexpr const char* to_string(cache_use c)
{
    switch (c) {
    case cache_use::write: return "write";
    case cache_use::read: return "read";
    case cache_use::extend: return "extend";
    default: return "off";
    }
}

struct elastic_epoch {
    replan_record record;          //!< epoch, F (blocks), K, replicas, M, cuts (units), throughput
    bool replanned = false;        //!< the shape was re-planned at the start of this epoch
    cache_use cache = cache_use::off;
    std::int64_t iterations = 0;   //!< per replica
    double iteration_seconds = 0;  //!< simulated, one pipeline iteration
    double seconds = 0;            //!< the whole epoch (replan cost included)
};

struct elastic_plan {
    elastic_components use;        //!< the components in effect (after implications)
    std::vector<elastic_epoch> epochs;
    double seconds = 0;
};

template <freeze_policy P>
elastic_plan plan_elastic(const elastic_model& model, const elastic_options& o, P& policy)
{
    model.validate();
    detail::require(o.epochs >= 1, "elastic: epochs must be >= 1, got " + std::to_string(o.epochs));
    detail::require(o.epochs <= max_planned_epochs,
                    "elastic: " + std::to_string(o.epochs) + " epochs; a plan covers at most " +
                        std::to_string(max_planned_epochs) + " (one re-plan per epoch, and more than any training runs)");
    detail::require(model.nodes <= o.devices, "elastic: the model spreads its cache over " + std::to_string(model.nodes) +
                                                  " nodes, but the plan has " + std::to_string(o.devices) +
                                                  " devices; a node holds at least one device (lower \"nodes\")");
    elastic_plan plan;
    plan.use = o.use;
    if (!plan.use.freeze) plan.use.autocache = false;  // nothing frozen, nothing to cache
    if (!plan.use.autopipe) plan.use.autodp = plan.use.autocache = false;
    const auto costs = model.train_costs();
    autopipe_options ao{o.devices, o.initial_stages, o.min_stages, 0, o.strict, plan.use.autodp, model.batch,
                        o.microbatch_factor, o.schedule};
    pipeline_shape shape;
    int frozen = 0, cached = 0;
    for (int e = 0; e < o.epochs; ++e) {
        elastic_epoch ep;
        const int previous = frozen;
        if (plan.use.freeze) frozen = next_frozen(policy, freeze_observation{e, model.layers, frozen, o.max_frozen, {}});
        const int fu = model.frozen_units(frozen);
        double prefix = 0, prefix_training = 0;  // seconds per sample of the frozen prefix
        for (int u = 0; u < fu; ++u) prefix += model.forward(static_cast<std::size_t>(u)), prefix_training += costs[u];
        prefix_source source;
        if (plan.use.autocache && fu > 0 && prefix > model.cache_seconds()) {  // reading beats recomputing
            source.cached_units = cached;
            source.write = fu > cached;
            ep.cache = cached == 0 ? cache_use::write : source.write ? cache_use::extend : cache_use::read;
            cached = fu;
        }
        const elastic_latency latency{&model, o.devices, o.initial_stages, plan.use.autodp, source};
        ao.lambda = o.lambda ? *o.lambda : fu > 0 && prefix_training > 0 ? latency.prefix_seconds(fu) / prefix_training : 0;
        const autopipe pipe(costs, ao, latency);
        if (e == 0) {
            shape = plan.use.autopipe ? pipe.replan(fu, o.initial_stages) : pipe.shape(0, o.initial_stages);
            ep.replanned = true;
        } else if (plan.use.autopipe && frozen != previous) {
            shape = pipe.replan(fu, shape.stages);
            ep.replanned = true;
        } else {
            shape.frozen = fu;  // same cuts and microbatches; frozen units now skip backward
            shape.iteration_seconds =
                simulate_iteration(latency.stage_times(shape.layers.cuts, fu), model.batch, shape.microbatches, o.schedule);
        }
        const std::int64_t per_round = static_cast<std::int64_t>(shape.replicas) * model.batch;
        ep.iterations = (model.samples_per_epoch + per_round - 1) / per_round;
        ep.iteration_seconds = shape.iteration_seconds;
        ep.seconds = static_cast<double>(ep.iterations) * shape.iteration_seconds +
                     (ep.replanned && e > 0 ? model.replan_seconds : 0);
        ep.record = replan_record{e, frozen, shape.stages, shape.replicas, shape.microbatches, shape.layers.cuts,
                                  ep.cache == cache_use::read || ep.cache == cache_use::extend,
                                  static_cast<double>(model.samples_per_epoch) / ep.seconds, std::nullopt, {}};
        plan.seconds += ep.seconds;
        plan.epochs.push_back(std::move(ep));
    }
    return plan;
}

} // namespace tpipe::elastic
