#pragma once
// The elastic GPT's planning: its units for tpipe's partitioner (the layers, then the tail:
// final LayerNorm and LM head), their costs, a latency model measured on this machine, and the
// freeze policy; tpipe::autopipe makes the decisions. Threads and MPI processes plan alike (under
// MPI, process 0 measures and the others take its measurement).
#include <span>
#include <vector>

#include <tpipe/elastic/autopipe.hpp>
#include <tpipe/elastic/replan.hpp>
#include <tpipe/elastic/stage_times.hpp>

#include "gpt/elastic.hpp"

namespace gpt {

//! One interval's pipeline: what every replica runs.
struct elastic_shape {
    int frozen = 0, stages = 1, replicas = 1, microbatches = 1;
    std::vector<int> unit_cuts;   //!< over the layers + 1 units (frozen prefix in stage 0)
    std::vector<int> layer_cuts;  //!< gpt::pipelined_model's cuts: frozen, ..., layers
    double predicted_throughput = 0;  //!< samples per second, simulated
    tpipe::replan_record record(int interval, bool cached) const;
};

unit_seconds measure_units(const config& cfg, std::int64_t seq_len, int threads);

//! The pipeline latency model of tpipe::autopipe: a stage's forward is its units' (frozen units
//! included unless their outputs come from the cache), its backward its active units'.
struct gpt_latency {
    unit_seconds units;
    bool cached = true;
    tpipe::stage_times stage_times(std::span<const int> cuts, int frozen) const;
};

class elastic_planner {
public:
    //! `measured`: the unit times to plan with (empty: measured here).
    elastic_planner(const config& cfg, const elastic_options& o, int threads, unit_seconds measured = {});

    //! The frozen layer count of `interval` after `frozen` (the options' policy, checked).
    int next_frozen(int interval, int frozen) const;
    elastic_shape initial() const;
    //! The shape once `frozen` layers are frozen, shrinking from `stages`.
    elastic_shape replan(int frozen, int stages) const;
    const unit_seconds& measured() const { return latency_.units; }

private:
    elastic_shape complete(const tpipe::pipeline_shape& s) const;

    config cfg_;
    elastic_options o_;
    gpt_latency latency_;
    tpipe::autopipe<gpt_latency> autopipe_;
};

} // namespace gpt
