#pragma once
// tpipe::elastic::freezable_model: what a model provides so that the elastic driver
// (tpipe/elastic/thread_driver.hpp) trains it the PipeTransformer way -- freezing a prefix of
// its units, re-cutting the active ones into a shorter pipeline, turning the freed devices into
// data-parallel replicas and caching the frozen prefix's outputs. One object is one replica:
// its weights, optimizer state and stage functors. The model:
//
//   using stage_type = ...;          // a uniform tpipe::stage that exposes_gradients
//   using frozen_output = ...;       // one sample's frozen-prefix output (a byte_payload: AutoCache
//                                    // keeps it in memory or on disk)
//   std::vector<double> unit_costs() const;  // its pipelined units in order, their costs
//   int freezable_units() const;     // how many leading units may ever freeze (< unit count)
//   uniform_pipeline<stage_type>& build(const stage_request&);  // the stage functors for cuts
//   const io_for<uniform_pipeline<stage_type>>& io() const;     // where stage 0 reads, the loss
//   void begin_step(std::span<const std::int64_t> ids, std::vector<frozen_output> frozen);
//   double finish_step();            // after the run: the step's mean loss
//   void optimizer_step();           // after the gradient all-reduce
//   void freeze(int units);          // units [0, units) train no more (drop their optimizer state)
//   std::vector<std::span<std::byte>> trainable_state();  // what a new replica receives: every
//                                    // weight (the frozen ones too: it runs the frozen prefix) and
//                                    // the optimizer state
//   frozen_output run_frozen(std::int64_t id, std::optional<frozen_output> from, int from_units,
//                            int to_units);  // units [from_units, to_units) on sample `id`
//
// The driver calls begin_step with, per sample of the replica's share, the output of the frozen
// prefix (empty when nothing is frozen); the model's stage 0 reads its unit's rows and tokens
// from it (a token-sliced scheme reads the tokens of each slice).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tpipe/exec/gradients.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/exec/pipeline.hpp"
#include "tpipe/exec/run_options.hpp"

namespace tpipe::elastic {

//! The pipeline a replica must build: stage s runs units [cuts[s], cuts[s + 1]); units
//! [0, frozen) are frozen and outside it (cuts.front() == frozen).
struct stage_request {
    std::vector<int> cuts;   //!< stages + 1 points, from the frozen count to the unit count
    int frozen = 0;
    int threads = 1;         //!< compute threads of each stage
    std::vector<bool> here;  //!< per stage: built in this process (empty: every stage)
    int stages() const { return static_cast<int>(cuts.size()) - 1; }
};

template <class M>
concept freezable_model =
    uniform_stage<typename M::stage_type> && exposes_gradients<typename M::stage_type> &&
    byte_payload<typename M::frozen_output> &&
    requires(M& m, const M& cm, const stage_request& r, std::span<const std::int64_t> ids,
             std::vector<typename M::frozen_output> outs, std::int64_t id,
             std::optional<typename M::frozen_output> from, int units) {
        { cm.unit_costs() } -> std::same_as<std::vector<double>>;
        { cm.freezable_units() } -> std::convertible_to<int>;
        { m.build(r) } -> std::same_as<uniform_pipeline<typename M::stage_type>&>;
        { m.io() } -> std::convertible_to<const io_for<uniform_pipeline<typename M::stage_type>>&>;
        m.begin_step(ids, std::move(outs));
        { m.finish_step() } -> std::convertible_to<double>;
        m.optimizer_step();
        m.freeze(units);
        { m.trainable_state() } -> std::same_as<std::vector<std::span<std::byte>>>;
        { m.run_frozen(id, std::move(from), units, units) } -> std::same_as<typename M::frozen_output>;
    };

//! A freezable_model the MPI driver (tpipe/mpi/elastic_driver.hpp) trains with one process per
//! device. Each process holds the whole model but builds only its own rank's stages
//! (stage_request::here); after the run, the driver sums the trainable gradients over the
//! pipeline's processes and every process steps the whole optimizer. So the model also gives
//!
//!   gradient_view trainable_gradients();  // every trainable parameter's gradient (frozen units'
//!                                         // left out), zeros where another process's stages ran
template <class M>
concept process_freezable_model = freezable_model<M> && requires(M& m) {
    { m.trainable_gradients() } -> std::same_as<gradient_view>;
};

} // namespace tpipe::elastic
