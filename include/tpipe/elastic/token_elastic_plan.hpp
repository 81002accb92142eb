#pragma once
// PipeTransformer x TeraPipe, simulated at scale: a decoder-only transformer trained over
// epochs, priced four ways on one analytic latency model (tpipe/plan/analytic_latency.hpp):
//   none             K0 stages, N / K0 replicas, microbatches of whole sequences;
//   terapipe         the same pipeline, the TeraPipe DP's rows x token slices;
//   pipetransformer  progressive freezing: the frozen prefix leaves the pipeline (AutoCache
//                    serves its output), AutoPipe halves the pipeline while its slowest stage
//                    holds no more layers than a starting stage, AutoDP makes N / K replicas;
//   both             the PipeTransformer shapes, each re-sliced by the TeraPipe DP for its depth.
// Assumptions (each named so that a table can state it):
// - Layers are identical; a stage's time is the analytic model's for ceil(active / K) layers
//   (the slowest stage), without the LM head. Frozen layers are out of the pipeline.
// - The per-pipeline batch is fixed (the paper's semantics): an epoch is
//   ceil(samples / (replicas x batch)) iterations, each priced by the slicing objective
//   T = sum_u t_u + (K - 1) max_u t_u (microbatch-only or TeraPipe-planned).
// - Replicas all-reduce their stage's active gradients once per iteration, ring over the link:
//   2 (D - 1) / D x 12 h^2 x layers / tp x 2 bytes, not overlapped.
// - AutoCache: when F grows, the newly frozen layers run forward once over every sample, spread
//   over all N devices; a layer's forward is 1/3 of its training time (backward = 2 x forward).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/fraction.hpp"
#include "tpipe/elastic/freeze.hpp"
#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/plan/baselines.hpp"
#include "tpipe/plan/slicing_dp.hpp"

namespace tpipe::elastic {

struct token_elastic_options {
    transformer_shape model;
    device_spec device;
    link_spec link;
    int tensor_parallel = 1;
    int devices = 1;                  //!< N pipeline devices (each a tensor-parallel group)
    int initial_stages = 1;           //!< K0, divides N
    std::int64_t seq_len = 2048;
    std::int64_t batch = 1;           //!< sequences per pipeline iteration
    std::int64_t granularity = 16;    //!< token cuts are multiples of it
    std::int64_t samples_per_epoch = 1;
    int epochs = 1;
    fraction alpha{1, 3};             //!< progressive freeze degree
};

enum class token_elastic_case { none, terapipe, pipetransformer, both };
constexpr const char* to_string(token_elastic_case c)
{
    switch (c) {
    case token_elastic_case::terapipe: return "TeraPipe alone";
    case token_elastic_case::pipetransformer: return "PipeTransformer alone";
    case token_elastic_case::both: return "both";
    default: return "none";
    }
}

struct token_elastic_epoch {
    int epoch = 0, frozen = 0, stages = 1, replicas = 1;
    int microbatches = 1, max_slices = 1;  //!< of the iteration's plan
    double iteration_seconds = 0;          //!< slicing objective plus the gradient all-reduce
    double cache_seconds = 0;              //!< AutoCache's extension this epoch
    double seconds = 0;
};

struct token_elastic_plan {
    token_elastic_case which = token_elastic_case::none;
    std::vector<token_elastic_epoch> epochs;
    double seconds = 0;
};

inline token_elastic_plan plan_token_elastic(const token_elastic_options& o, token_elastic_case which)
{
    const int L = o.model.layers;
    detail::require(o.devices >= 1 && o.initial_stages >= 1 && o.devices % o.initial_stages == 0 && o.initial_stages <= L,
                    "token elastic plan: K0 = " + std::to_string(o.initial_stages) + " must divide the " +
                        std::to_string(o.devices) + " devices and be at most the " + std::to_string(L) + " layers");
    detail::require(o.epochs >= 1 && o.batch >= 1 && o.samples_per_epoch >= 1,
                    "token elastic plan: epochs, batch and samples_per_epoch must be >= 1");
    const bool freeze = which == token_elastic_case::pipetransformer || which == token_elastic_case::both;
    const bool slices = which == token_elastic_case::terapipe || which == token_elastic_case::both;
    const analytic_latency::options lo{.tensor_parallel = o.tensor_parallel};
    const double layer_train = analytic_latency(o.model, 1, o.device, o.link, lo).seconds(1, o.seq_len, 0);
    const int start_per_stage = (L + o.initial_stages - 1) / o.initial_stages;
    const progressive_freeze policy(o.alpha);
    token_elastic_plan plan;
    plan.which = which;
    int frozen = 0, stages = o.initial_stages;
    for (int e = 0; e < o.epochs; ++e) {
        token_elastic_epoch ep;
        const int before = frozen;
        // At least one layer stays active (the head's stage keeps one to train with it).
        if (freeze) frozen = next_frozen(policy, freeze_observation{e, L, frozen, L - 1, {}});
        const int active = L - frozen;
        if (freeze)
            while (stages % 2 == 0 && (stages > active || (active + stages / 2 - 1) / (stages / 2) <= start_per_stage))
                stages /= 2;
        const int per_stage = (active + stages - 1) / stages;
        const int replicas = o.devices / stages;
        const analytic_latency lat(o.model, per_stage, o.device, o.link, lo);
        const slicing_problem p{.stages = stages, .seq_len = o.seq_len, .batch = o.batch, .granularity = o.granularity};
        const slicing_plan sp = slices ? plan_slices(lat, p) : best_microbatch_only(lat, p);
        const double h = static_cast<double>(o.model.hidden);
        const double grad_bytes = 12 * h * h * per_stage / o.tensor_parallel * 2;
        const double allreduce =
            replicas > 1 ? 2.0 * (replicas - 1) / replicas * grad_bytes / (o.link.bandwidth * o.link.efficiency) : 0;
        ep.epoch = e;
        ep.frozen = frozen;
        ep.stages = stages;
        ep.replicas = replicas;
        const auto sch = sp.scheme();
        ep.microbatches = sch.microbatches();
        ep.max_slices = sch.max_slices();
        ep.iteration_seconds = sp.objective + allreduce;
        ep.cache_seconds = static_cast<double>(o.samples_per_epoch) * (frozen - before) * layer_train / 3 / o.devices;
        const std::int64_t per_round = static_cast<std::int64_t>(replicas) * o.batch;
        const std::int64_t iterations = (o.samples_per_epoch + per_round - 1) / per_round;
        ep.seconds = static_cast<double>(iterations) * ep.iteration_seconds + ep.cache_seconds;
        plan.seconds += ep.seconds;
        plan.epochs.push_back(ep);
    }
    return plan;
}

} // namespace tpipe::elastic
