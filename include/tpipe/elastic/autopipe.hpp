#pragma once
// AutoPipe + AutoDP: the pipeline shape after a freeze change. The active units are
// re-partitioned (partition_layers, frozen prefix on stage 0 weighted by lambda), and the
// pipeline is halved while the slowest stage of the halved pipeline does not exceed the
// slowest stage of the starting pipeline (<= as the released code; < on request). Devices a
// shorter pipeline frees become data-parallel replicas (replicas = devices / stages). The
// microbatch count of the chosen shape is the one with the shortest simulated iteration.
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/partition.hpp"
#include "tpipe/elastic/stage_times.hpp"

namespace tpipe::elastic {

struct autopipe_options {
    int devices = 1;                 //!< N, all devices of the job
    int initial_stages = 1;          //!< K0; must divide N
    int min_stages = 1;              //!< never halve below this
    double lambda = 0;               //!< frozen-unit cost factor in partitioning and the halving test
    bool strict = false;             //!< halve only while strictly below the starting slowest stage
    bool add_replicas = true;        //!< AutoDP: freed devices become replicas (else they idle)
    int batch = 1;                   //!< samples per pipeline iteration
    int microbatch_factor = 6;       //!< microbatch counts tried: K .. factor K
    pipeline_schedule schedule = pipeline_schedule::gpipe;  //!< what the simulated iteration runs
};

//! One pipeline shape: what every replica runs.
struct pipeline_shape {
    int frozen = 0;            //!< frozen units (the prefix), not layers
    int stages = 1;            //!< K
    int replicas = 1;          //!< data-parallel pipelines
    partition layers;          //!< cuts over all units; frozen prefix in stage 0
    int microbatches = 1;
    double iteration_seconds = 0;  //!< simulated, one pipeline, one batch
};

template <pipeline_latency Latency>
class autopipe {
public:
    autopipe(std::vector<double> costs, autopipe_options o, Latency latency)
        : costs_(std::move(costs)), o_(o), latency_(std::move(latency))
    {
        detail::require(o_.devices >= 1, "autopipe: devices must be >= 1, got " + std::to_string(o_.devices));
        detail::require(o_.initial_stages >= 1 && o_.devices % o_.initial_stages == 0,
                        "autopipe: the initial pipeline length K0 = " + std::to_string(o_.initial_stages) +
                            " must be >= 1 and divide the " + std::to_string(o_.devices) + " devices");
        detail::require(o_.min_stages >= 1 && o_.min_stages <= o_.initial_stages,
                        "autopipe: min_stages must lie in [1, K0 = " + std::to_string(o_.initial_stages) + "], got " +
                            std::to_string(o_.min_stages));
        reference_ = partition_layers(costs_, o_.initial_stages).max_stage_cost;
    }

    //! M_GPU(0): the slowest stage of the starting pipeline (nothing frozen, K0 stages).
    double reference_cost() const { return reference_; }
    const autopipe_options& options() const { return o_; }

    //! The starting shape: K0 stages, nothing frozen.
    pipeline_shape initial() const { return shape(0, o_.initial_stages); }

    //! The shape once `frozen` units are frozen, shrinking from `stages` (the current K).
    //! A K that leaves a stage without an active unit is halved regardless of cost (refused
    //! when that goes below min_stages).
    pipeline_shape replan(int frozen, int stages) const
    {
        detail::require(frozen >= 0 && frozen < static_cast<int>(costs_.size()),
                        "autopipe: frozen units must lie in [0, " + std::to_string(costs_.size()) +
                            "): at least one unit (the head) stays active, got " + std::to_string(frozen));
        detail::require(stages >= 1 && o_.initial_stages % stages == 0,
                        "autopipe: current stages " + std::to_string(stages) + " must divide K0 = " +
                            std::to_string(o_.initial_stages));
        const int active = static_cast<int>(costs_.size()) - frozen;
        int k = stages;
        while (k > 1 && (k > active || (k % 2 == 0 && k / 2 >= o_.min_stages && fits(frozen, k / 2)))) k /= 2;
        detail::require(k >= o_.min_stages || k == stages,
                        "autopipe: " + std::to_string(active) + " active units cannot fill min_stages = " +
                            std::to_string(o_.min_stages) + " stages; freeze fewer units or lower min_stages");
        return shape(frozen, k);
    }

    //! The shape with exactly `stages` stages (re-partitioned, microbatches simulated).
    pipeline_shape shape(int frozen, int stages) const
    {
        pipeline_shape s;
        s.frozen = frozen;
        s.stages = stages;
        s.replicas = o_.devices / (o_.add_replicas ? stages : o_.initial_stages);
        s.layers = partition_layers(costs_, stages, frozen, o_.lambda);
        const auto choice = choose_microbatches(latency_.stage_times(s.layers.cuts, frozen), o_.batch,
                                                o_.microbatch_factor, o_.schedule);
        s.microbatches = choice.microbatches;
        s.iteration_seconds = choice.iteration_seconds;
        return s;
    }

private:
    bool fits(int frozen, int k) const
    {
        if (static_cast<int>(costs_.size()) - frozen < k) return false;
        const double c = partition_layers(costs_, k, frozen, o_.lambda).max_stage_cost;
        return o_.strict ? c < reference_ : c <= reference_;
    }

    std::vector<double> costs_;
    autopipe_options o_;
    Latency latency_;
    double reference_ = 0;
};

} // namespace tpipe::elastic
