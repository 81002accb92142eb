#pragma once
// The best parallel configuration of a transformer on N devices: every tensor-parallel degree t
// (a divisor of the devices per node that divides the heads; Megatron stays inside a node),
// every pipeline depth K <= layers and data-parallel width d with t K d = N and d dividing the
// global batch, each pipeline getting b = batch / d rows. For each, the analytic model of the
// fullest stage (ceil(layers / K) layers), the exact slicing DP over its b rows (token slices
// and microbatches, shared cut), the memory check (memory_fit: weights, gradients, fp32 master
// and Adam state, every unit's activations and K/V alive as the DP's objective assumes), and
// the time
//     pipeline objective + data-parallel gradient all-reduce
// where the all-reduce is a ring over the inter-node link of the stage's gradients:
// 2 (d-1)/d x parameters x gradient bytes / achieved link rate + 2 (d-1) x link latency. Not
// priced: the optimizer step (TeraPipe adds a constant per stage that does not change a plan).
// Configurations that do not fit are kept in the table, marked, after those that do.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/memory_fit.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/slicing_dp.hpp"

namespace tpipe {

struct search_problem {
    transformer_shape model;
    device_spec device;
    link_spec link;
    int devices = 1;                 //!< N
    std::int64_t batch = 1;          //!< global batch, rows
    std::int64_t seq_len = 2048;
    std::int64_t granularity = 8;    //!< token granularity of the slicing DP
    int devices_per_node = 8;        //!< tensor parallelism stays inside a node
    double memory_per_device = std::numeric_limits<double>::infinity();
    memory_options memory{};
    analytic_form form = analytic_form::calibrated;
};

struct configuration {
    int tensor_parallel = 1;
    int stages = 1;
    int data_parallel = 1;
    std::int64_t rows = 1;           //!< batch per pipeline
    slicing_plan plan;               //!< the slicing that runs (the DP's, or the best fitting one)
    double microbatch_only = 0;      //!< the best plan without token slicing, same objective
    double pipeline_seconds = 0;     //!< plan.objective
    double all_reduce_seconds = 0;
    double seconds = 0;              //!< pipeline + all-reduce
    double memory_bytes = 0;         //!< static + activations of plan
    bool fits = true;
};

//! Every configuration of `p`, the fitting ones first by time (then fewer stages, then less
//! tensor parallelism), then those that do not fit by memory need.
inline std::vector<configuration> search_configurations(const search_problem& p)
{
    detail::require(p.devices >= 1 && p.batch >= 1 && p.devices_per_node >= 1,
                    "configuration search: devices, batch and devices per node must be >= 1");
    detail::require(p.seq_len >= 1 && p.granularity >= 1 && p.seq_len % p.granularity == 0,
                    "configuration search: the granularity " + std::to_string(p.granularity) +
                        " must divide the sequence length " + std::to_string(p.seq_len));
    std::vector<configuration> out;
    for (int t = 1; t <= p.devices_per_node; ++t) {
        if (p.devices_per_node % t || p.model.heads % t || p.devices % t) continue;
        for (int K = 1; K <= p.model.layers; ++K) {
            if ((p.devices / t) % K) continue;
            const int d = p.devices / t / K;
            if (p.batch % d) continue;
            configuration c;
            c.tensor_parallel = t;
            c.stages = K;
            c.data_parallel = d;
            c.rows = p.batch / d;
            const auto model = presets::analytic(p.model, K, p.device, p.link, {.tensor_parallel = t, .form = p.form});
            const slicing_problem sp{K, p.seq_len, c.rows, p.granularity, cut_mode::shared};
            const memory_model mem(model, p.seq_len, p.memory);
            const auto fit = fit_in_memory(model, sp, plan_slices(model, sp), mem, p.memory_per_device);
            c.plan = fit.plan;
            c.fits = fit.fits;
            c.memory_bytes = fit.fits ? fit.bytes : std::max(fit.bytes, fit.least_bytes);
            c.microbatch_only = best_microbatch_only(model, sp).objective;
            c.pipeline_seconds = c.plan.objective;
            if (d > 1)
                c.all_reduce_seconds = 2.0 * (d - 1) / d * mem.parameters() * p.memory.gradient_bytes / model.link_rate() +
                                       2.0 * (d - 1) * p.link.latency;
            c.seconds = c.pipeline_seconds + c.all_reduce_seconds;
            out.push_back(std::move(c));
        }
    }
    detail::require(!out.empty(), "configuration search: no t x K x d = " + std::to_string(p.devices) +
                                      " with t dividing " + std::to_string(p.devices_per_node) +
                                      " and the heads, K <= " + std::to_string(p.model.layers) +
                                      " layers and d dividing the batch " + std::to_string(p.batch));
    std::stable_sort(out.begin(), out.end(), [](const configuration& a, const configuration& b) {
        if (a.fits != b.fits) return a.fits;
        if (!a.fits) return a.memory_bytes < b.memory_bytes;
        if (a.seconds != b.seconds) return a.seconds < b.seconds;
        if (a.stages != b.stages) return a.stages < b.stages;
        return a.tensor_parallel < b.tensor_parallel;
    });
    return out;
}

} // namespace tpipe
