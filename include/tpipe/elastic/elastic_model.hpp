#pragma once
// What the elastic planner knows about a model and its machine: the pipelined units in order
// (the paper's sublayers), the block each belongs to (freezing F blocks freezes every unit of
// block < F; the embedding belongs to block 0, the head to block L, so it never freezes), and a
// latency model: forward seconds proportional to parameters (2 FLOPs per parameter per token
// at a sustained rate) unless a unit gives its own, backward = backward_factor x forward for
// active units, a fixed cost per microbatch compute, activation transfers between stages, a
// ring all-reduce of the active gradients over the replicas, and AutoCache's per-sample cost.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe::elastic {

struct elastic_unit {
    std::string name;
    double params = 0;             //!< parameters (the paper's cost proxy)
    int block = 0;                 //!< freezes once F > block; the head has block = layers
    double forward_seconds = -1;   //!< per sample; < 0: params x seconds_per_param
};

struct elastic_model {
    std::string name;
    int layers = 1;                        //!< L, the freezable blocks
    std::vector<elastic_unit> units;       //!< pipelined units, in order
    std::int64_t samples_per_epoch = 1;    //!< samples every epoch visits once over all replicas
    int batch = 1;                         //!< samples per pipeline iteration (per replica)
    double activation_bytes = 0;           //!< one sample's activation between units (and cached)
    double seconds_per_param = 0;          //!< forward seconds per parameter per sample
    double backward_factor = 2;            //!< backward / forward time of an active unit
    double per_microbatch_seconds = 0;     //!< fixed cost of each forward or backward compute
    double link_bandwidth = 0;             //!< bytes/s between neighbouring stages (0: free)
    double link_latency = 0;               //!< seconds per transfer
    double allreduce_bandwidth = 0;        //!< bytes/s per replica link of the all-reduce (0: free)
    double gradient_bytes_per_param = 4;
    double cache_seconds_per_sample = 0;   //!< host work to read or write one cached sample
    double host_bandwidth = 0;             //!< bytes/s host <-> device for cached activations (0: free)
    double cache_budget_bytes = std::numeric_limits<double>::infinity();  //!< host bytes per node
    double disk_bandwidth = 0;             //!< bytes/s for cached samples beyond the budget
    int nodes = 1;                         //!< the cache is node-local: each node holds its share
    double replan_seconds = 0;             //!< fixed cost of one pipeline change (rebuild, broadcast)

    double forward(std::size_t u) const
    {
        const auto& x = units[u];
        return x.forward_seconds >= 0 ? x.forward_seconds : x.params * seconds_per_param;
    }
    //! Units frozen when F blocks are: a prefix, since blocks never decrease along the units.
    int frozen_units(int frozen_blocks) const
    {
        int n = 0;
        while (n < static_cast<int>(units.size()) && units[n].block < frozen_blocks) ++n;
        return n;
    }
    //! Partition costs: per unit, training seconds per sample (forward + backward).
    std::vector<double> train_costs() const
    {
        std::vector<double> c;
        for (std::size_t u = 0; u < units.size(); ++u) c.push_back((1 + backward_factor) * forward(u));
        return c;
    }
    //! Seconds per sample to move one cached activation between host (or disk) and device.
    double cache_seconds() const
    {
        const double per_node = static_cast<double>(samples_per_epoch) / nodes * activation_bytes;
        const double on_disk = per_node > cache_budget_bytes ? 1 - cache_budget_bytes / per_node : 0;
        double s = cache_seconds_per_sample;
        if (host_bandwidth > 0) s += activation_bytes / host_bandwidth;
        if (on_disk > 0) s += on_disk * activation_bytes / disk_bandwidth;
        return s;
    }

    void validate() const
    {
        auto positive = [&](double v, const char* what) {
            detail::require(std::isfinite(v) && v >= 0, "elastic model " + name + ": " + what +
                                                            " must be finite and >= 0, got " + std::to_string(v));
        };
        detail::require(layers >= 1, "elastic model " + name + ": layers must be >= 1");
        detail::require(!units.empty(), "elastic model " + name + ": needs at least one unit");
        detail::require(samples_per_epoch >= 1 && batch >= 1,
                        "elastic model " + name + ": samples_per_epoch and batch must be >= 1");
        detail::require(nodes >= 1, "elastic model " + name + ": nodes must be >= 1");
        for (std::size_t u = 0; u < units.size(); ++u) {
            const auto& x = units[u];
            detail::require(x.block >= 0 && x.block <= layers, "elastic model " + name + ": unit '" + x.name +
                                                                   "' has block " + std::to_string(x.block) +
                                                                   ", outside [0, layers = " +
                                                                   std::to_string(layers) + "]");
            detail::require(u == 0 || x.block >= units[u - 1].block,
                            "elastic model " + name + ": unit '" + x.name +
                                "' belongs to an earlier block than the unit before it; freezing is a prefix");
            positive(x.params, "params");
            detail::require(std::isfinite(x.forward_seconds), "elastic model " + name + ": forward_seconds must be finite");
        }
        detail::require(units.back().block == layers,
                        "elastic model " + name + ": the last unit must be the head (block = layers), which never freezes");
        for (auto [v, what] : {std::pair{activation_bytes, "activation_bytes"}, {seconds_per_param, "seconds_per_param"},
                               {backward_factor, "backward_factor"}, {per_microbatch_seconds, "per_microbatch_seconds"},
                               {link_bandwidth, "link_bandwidth"}, {link_latency, "link_latency"},
                               {allreduce_bandwidth, "allreduce_bandwidth"},
                               {gradient_bytes_per_param, "gradient_bytes_per_param"},
                               {cache_seconds_per_sample, "cache_seconds_per_sample"},
                               {host_bandwidth, "host_bandwidth"}, {disk_bandwidth, "disk_bandwidth"},
                               {replan_seconds, "replan_seconds"}})
            positive(v, what);
        detail::require(cache_budget_bytes >= 0, "elastic model " + name + ": cache_budget_bytes must be >= 0");
        detail::require(disk_bandwidth > 0 || !(static_cast<double>(samples_per_epoch) / nodes * activation_bytes >
                                                cache_budget_bytes),
                        "elastic model " + name + ": the cache exceeds cache_budget_bytes, so disk_bandwidth must be > 0");
    }
};

} // namespace tpipe::elastic
