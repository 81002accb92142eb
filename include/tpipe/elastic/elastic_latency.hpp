#pragma once
// The pipeline latency of an elastic_model in one epoch: which frozen units still run (AutoCache
// may supply a prefix of them), and how many replicas share the gradient all-reduce. The frozen
// prefix runs forward only on the pipeline's first device, as in the paper, wherever the cuts
// put its units (with a fixed partition, stages left with frozen units only pass data through).
#include <span>
#include <vector>

#include "tpipe/elastic/elastic_model.hpp"
#include "tpipe/elastic/stage_times.hpp"

namespace tpipe::elastic {

//! How stage 0 obtains the frozen prefix's output in an epoch.
struct prefix_source {
    int cached_units = 0;  //!< the output of units [0, cached_units) is read from AutoCache (0: none)
    bool write = false;    //!< the output at the current F is stored for later epochs
};

struct elastic_latency {
    const elastic_model* model = nullptr;
    int devices = 1;
    int initial_stages = 1;
    bool add_replicas = true;  //!< AutoDP: replicas = devices / K, else devices / K0
    prefix_source cache;

    int replicas(int stages) const { return devices / (add_replicas ? stages : initial_stages); }

    //! Seconds per sample stage 0 spends on the frozen prefix [0, frozen) this epoch.
    double prefix_seconds(int frozen) const
    {
        double s = (cache.cached_units > 0 ? model->cache_seconds() : 0) + (cache.write ? model->cache_seconds() : 0);
        for (int u = cache.cached_units; u < frozen; ++u) s += model->forward(static_cast<std::size_t>(u));
        return s;
    }

    tpipe::elastic::stage_times stage_times(std::span<const int> cuts, int frozen) const
    {
        const auto& m = *model;
        tpipe::elastic::stage_times t;
        t.per_microbatch = m.per_microbatch_seconds;
        t.transfer = m.link_bandwidth > 0 ? m.activation_bytes / m.link_bandwidth : 0;
        t.latency = m.link_latency;
        const int stages = static_cast<int>(cuts.size()) - 1;
        const double r = replicas(stages);
        for (int s = 0; s < stages; ++s) {
            double f = 0, b = 0, grads = 0;
            for (int u = cuts[s]; u < cuts[s + 1]; ++u) {
                const double fu = m.forward(static_cast<std::size_t>(u));
                if (u >= frozen) f += fu, b += m.backward_factor * fu, grads += m.units[u].params * m.gradient_bytes_per_param;
            }
            if (s == 0) f += prefix_seconds(frozen);
            t.forward.push_back(f);
            t.backward.push_back(b);
            // Ring all-reduce of this stage's gradients among its r replicas.
            t.after.push_back(r > 1 && m.allreduce_bandwidth > 0 ? 2 * (r - 1) / r * grads / m.allreduce_bandwidth : 0);
        }
        return t;
    }
};
static_assert(pipeline_latency<elastic_latency>);

} // namespace tpipe::elastic
