#pragma once
// Elastic pipelined training of the reference GPT (PipeTransformer) through tpipe's elastic
// driver (tpipe/elastic/thread_driver.hpp): the GPT is a tpipe::elastic::freezable_model
// (gpt/elastic_gpt.hpp) whose units are its layers, then the tail (final LayerNorm and LM head);
// the driver freezes, re-cuts, adds replicas and caches. This file is the GPT's data, options
// and the non-elastic reference every elastic run must equal bitwise. The MPI variant is in
// train_gpt (--transport mpi).
//
// The embeddings freeze with layer 0. A tied LM head is the token embedding, so it freezes then
// too: the tail keeps reading it, frozen, and trains its final LayerNorm (frozen activations
// stay valid). An untied head trains on.
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <tpipe/elastic/driver_options.hpp>
#include <tpipe/elastic/thread_driver.hpp>

#include "gpt/model.hpp"

namespace gpt {

//! The corpus as numbered samples (the sampler and the cache need sample ids): sample k is the
//! tokens [k L, (k + 1) L) with the following byte of each as its target; trimmed to whole
//! global batches.
class window_dataset {
public:
    window_dataset(const std::string& text, std::int64_t seq_len, std::int64_t global_batch);
    std::int64_t samples() const { return samples_; }
    std::int64_t seq_len() const { return seq_len_; }
    //! The samples `ids` as the rows of one batch.
    batch rows(std::span<const std::int64_t> ids) const;

private:
    const std::string* text_;
    std::int64_t seq_len_, samples_;
};

//! Seconds per sample of each unit's (layer's, then the tail's) forward and backward.
using unit_seconds = tpipe::elastic::unit_seconds;
using interval_report = tpipe::elastic::interval_report;
using tpipe::elastic::compute_threads;

//! The driver's options (units = layers; seq_len is the config's), plus the GPT's optimizer.
//! `seed` seeds the weights and the sample order.
struct elastic_options : tpipe::elastic::driver_options {
    adamw_options opt{};
    //! TeraPipe inside the pipeline: token granularity of the slices (0: microbatches of whole
    //! sequences). The per-layer token latencies are profiled when training starts unless
    //! driver_options::slicing already holds them.
    std::int64_t terapipe_granularity = 0;
};

struct elastic_result : tpipe::elastic::run_report {
    std::vector<float> weights;  //!< final weights (every replica holds them)
};

//! A trainer's hands on replica 0's state (its weights and optimizer), for checkpoints.
struct elastic_hooks {
    //! Before the run: load a checkpoint into it and say where the run continues (none: the start).
    std::function<std::optional<tpipe::elastic::resume_point>(parameters<float>&, adamw<float>&)> resume{};
    //! After every step: the steps done, the step's plan and the state (driver_options::after_step).
    std::function<void(std::int64_t, const tpipe::elastic::replan_record&, parameters<float>&, adamw<float>&)> after_step{};
    //! After the run, stopped or not, with the state it ended with.
    std::function<void(const tpipe::elastic::run_report&, parameters<float>&, adamw<float>&)> after_run{};
};

//! TeraPipe inside the elastic pipeline: every unit's token latency tables, profiled on the
//! first global batch with `threads` compute threads (granularity o.terapipe_granularity).
tpipe::elastic::token_slicing profile_token_slicing(const config& cfg, const window_dataset& data,
                                                    const elastic_options& o, int threads);

//! Elastic training on threads. `on_interval` (optional) sees each interval when it ends.
elastic_result train_elastic(const config& cfg, const window_dataset& data, const elastic_options& o,
                             const std::function<void(const interval_report&)>& on_interval = {},
                             const elastic_hooks& hooks = {});

//! The same training, non-elastic: one model, no pipeline, no cache, no re-plans; at each step
//! the frozen prefix, the split of the batch into replicas and each replica's units (microbatches
//! or token slices) that `plan` recorded, run in the order a pipeline stage runs them (the sum
//! over replicas in rank order, then scaled by 1/D, as a rank-order all-reduce does). Elastic
//! training must give these weights bitwise.
std::vector<float> train_frozen_reference(const config& cfg, const window_dataset& data, const elastic_options& o,
                                          const std::vector<interval_report>& plan);

} // namespace gpt
