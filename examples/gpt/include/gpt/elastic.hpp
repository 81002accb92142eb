#pragma once
// Elastic pipelined training of the reference GPT (PipeTransformer): AutoFreeze freezes a prefix
// of layers per interval, AutoPipe re-partitions the active layers and shortens the pipeline,
// AutoDP turns the freed devices into data-parallel replicas, AutoCache keeps the frozen
// prefix's outputs per sample. The planning is tpipe's (tpipe/elastic/: freeze policies,
// partitioner, autopipe, replan_record); this file is the training side, on CPU threads (one
// "device" per loop thread). The MPI variant is in train_gpt (--transport mpi).
//
// Semantics chosen (the paper leaves them open or does otherwise):
// - The global batch is fixed: each step trains `batch` samples whatever the replica count,
//   each of D replicas its batch / D share (tpipe::elastic::epoch_sampler). The paper keeps the
//   per-pipeline batch and so grows the global batch with D, which changes the optimisation.
// - Re-plans happen at interval boundaries (every `freeze_every` steps, default one epoch).
// - Freezing requires an untied LM head (the embedding freezes with layer 0; the head trains).
#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <tpipe/elastic/cache.hpp>
#include <tpipe/elastic/replan.hpp>

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

//! Seconds per sample of each unit's (layer's, then the tail's) forward and backward, measured
//! on one sample (gpt/elastic_plan.hpp: measure_units).
struct unit_seconds {
    std::vector<double> forward, backward;
};

struct elastic_options {
    int devices = 2;               //!< N: the starting pipeline's length, and the devices replicas may use
    int batch = 8;                 //!< global batch: samples per step over every replica
    std::int64_t steps = 0;        //!< steps to train
    std::int64_t freeze_every = 0; //!< steps per freeze interval (0: one epoch)
    double alpha = 1.0 / 3;        //!< freeze degree of the progressive policy
    int max_frozen = -1;           //!< most layers that may freeze (-1: every layer; the head always trains)
    bool autopipe = true;          //!< shorten the pipeline as layers freeze
    bool autodp = true;            //!< freed devices become replicas
    bool autocache = true;         //!< cache the frozen prefix's outputs
    std::size_t cache_bytes = std::size_t{256} << 20;  //!< AutoCache's host budget (beyond it: disk)
    int threads = 0;               //!< compute threads in all (0: hardware threads)
    adamw_options opt{};
    std::uint64_t seed = 1;        //!< weights and sample order
    unit_seconds measured{};       //!< the planner's unit times (empty: measured when training starts)
    //! Tests: the frozen layer count of interval i given the previous one (replaces the policy).
    std::function<int(int interval, int frozen)> freeze{};
};

//! Compute threads an elastic run uses in all: options::threads, or every hardware thread.
inline int compute_threads(const elastic_options& o)
{
    return o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

//! One interval: its plan and what it measured.
struct interval_report {
    tpipe::replan_record plan;     //!< epoch = interval index; measured_throughput in samples/s
    std::int64_t first_step = 0, steps = 0;
    std::vector<int> layer_cuts;   //!< the pipeline's layer cuts (from the frozen count to the layers)
    double seconds = 0;            //!< training time of the interval's steps
    double replan_seconds = 0;     //!< re-forming replicas, communicators and pipelines before it
    double mean_loss = 0;
    tpipe::elastic::cache_stats cache{};
    std::int64_t rows_computed = 0, rows_extended = 0, rows_cached = 0;  //!< frozen-prefix rows by source
};

struct elastic_result {
    std::vector<interval_report> intervals;
    std::vector<float> weights;        //!< final weights (every replica holds them)
    bool replicas_identical = true;    //!< after every step, every replica held replica 0's weights
    bool replans_kept_weights = true;  //!< every re-plan left replica 0's weights and optimizer state bitwise unchanged
    double seconds = 0;                //!< training, re-plans included
};

//! Elastic training on threads. `on_interval` (optional) sees each interval when it ends.
elastic_result train_elastic(const config& cfg, const window_dataset& data, const elastic_options& o,
                             const std::function<void(const interval_report&)>& on_interval = {});

//! The same training, non-elastic: one model, no pipeline, no cache, no re-plans; at each step
//! the frozen prefix and the split of the batch into replicas and microbatches that `plan`
//! recorded (the sum over replicas in rank order, then scaled by 1/D, as a rank-order
//! all-reduce does). Elastic training must give these weights bitwise.
std::vector<float> train_frozen_reference(const config& cfg, const window_dataset& data, const elastic_options& o,
                                          const std::vector<interval_report>& plan);

} // namespace gpt
