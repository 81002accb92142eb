#pragma once
// The reference GPT as a tpipe::elastic::freezable_model: one replica's weights, optimizer and
// pipeline parts. Units: layers 0..L-1 (the embeddings belong to layer 0), then the tail (final
// LayerNorm and LM head), which never freezes. Stage cuts over the units map to the layer cuts
// of gpt::pipelined_model (the tail always ends the last stage).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <tpipe/elastic/freezable_model.hpp>
#include <tpipe/plan/profiler.hpp>

#include "gpt/elastic.hpp"
#include "gpt/frozen.hpp"
#include "gpt/pipeline.hpp"

namespace gpt {

class elastic_gpt {
public:
    using stage_type = stage<float>;
    using frozen_output = activation<float>;

    //! Weights initialised from `seed`: what a replica that has not trained holds.
    elastic_gpt(const config& cfg, const window_dataset& data, adamw_options opt, std::uint64_t seed);

    std::vector<double> unit_costs() const;
    int freezable_units() const { return cfg_.layers; }
    tpipe::uniform_pipeline<stage_type>& build(const tpipe::elastic::stage_request& r);
    const tpipe::io_for<tpipe::uniform_pipeline<stage_type>>& io() const { return model_->io(); }
    void begin_step(std::span<const std::int64_t> ids, std::vector<frozen_output> frozen);
    double finish_step() { return model_->finish_step(); }
    void optimizer_step() { opt_.step(params_); }
    void freeze(int layers) { opt_.freeze(params_.lay.frozen_end(layers)); }
    std::vector<std::span<std::byte>> trainable_state();
    //! The active parameters' gradients (after the frozen layers), for the MPI driver's sum over
    //! the pipeline's processes.
    tpipe::gradient_view trainable_gradients()
    {
        return {.f32 = {std::span<float>(params_.grad).subspan(static_cast<std::size_t>(opt_.frozen()))}, .f64 = {}};
    }
    frozen_output run_frozen(std::int64_t id, std::optional<frozen_output> from, int from_layers, int to_layers);

    parameters<float>& params() { return params_; }
    adamw<float>& optimizer() { return opt_; }

private:
    config cfg_;
    const window_dataset* data_;
    parameters<float> params_;
    adamw<float> opt_;
    std::unique_ptr<pipelined_model<float>> model_;
    std::unique_ptr<frozen_prefix<float>> prefix_;  // runs the frozen layers (the driver caches)
    batch batch_;
    activation<float> frozen_out_;  // this step's frozen-prefix output, all rows (stage 0's source)
};
static_assert(tpipe::elastic::process_freezable_model<elastic_gpt>);

//! The unit costs tpipe's partitioner cuts by: the parameters a unit multiplies by (the
//! embedding is a lookup and costs nothing), the paper's proxy, the same on every process.
std::vector<double> unit_costs(const config& cfg);

//! Each unit's forward and backward seconds, per sample and fixed per microbatch, its share of
//! AdamW's step (unit_seconds::update) and its gradients' all-reduce between two replicas
//! (unit_seconds::reduce): tpipe::elastic::measure_units on a scratch elastic_gpt, with 8
//! one-sample microbatches in flight, then the 8 as one (the median of 11 each).
unit_seconds measure_units(const config& cfg, std::int64_t seq_len, int threads);

//! Each unit's forward + backward time of b rows, s tokens and c context, profiled on `probe`
//! over `grid` (the driver composes stages from them at every re-plan).
std::vector<tpipe::table_latency> profile_units(const config& cfg, const batch& probe, const tpipe::profile_grid& grid,
                                                int threads);

} // namespace gpt
