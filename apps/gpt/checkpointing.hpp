#pragma once
// train_gpt's checkpoints, on tpipe/state: the reference GPT's parameters and AdamW moments as
// named ranges ("param/h.0.attn.w_qkv", "adamw.m/...", "adamw.v/..."), one shard per pipeline
// rank holding the tensors of that rank's stages (written by the process running that rank of
// replica 0, from its stage-local state), and the step, optimizer, data streams and run shape in
// the manifest. With --shard-optimizer each replica d writes "rank-R-dp-d.bin": the AdamW moments
// of its shard (pieces of tensors; replica 0's also holds the parameters). A resume reads every tensor a stage holds by name, whatever stages, cuts,
// replicas, tensor ranks or transport saved it. With --tp each tensor rank writes
// "rank-R-tp-k.bin": its share of the split tensors as ranges of the whole tensors (the whole
// tensors from tensor rank 0), so a resume at any other tensor-rank count reads them back. A tied LM head is saved once, as the embedding "wte"; the last
// stage's copy of it is read from there (the copies are equal: they take the same steps).
//
// An elastic run (--elastic) saves the same names in one shard: every process of an elastic run
// holds the whole model, so replica 0's first process writes it. Frozen layers have parameters
// and no AdamW moments (their optimizer state is dropped when they freeze); the manifest's
// elastic section holds the frozen layer count and the saved step's plan, which a resume
// continues from (tpipe::elastic::resume_point).
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <tpipe/core/json.hpp>
#include <tpipe/elastic/driver_options.hpp>
#include <tpipe/elastic/replan.hpp>
#include <tpipe/state/checkpoint_writer.hpp>

#include "gpt/model.hpp"
#include "gpt/stage_state.hpp"

namespace gpt {

struct checkpoint_flags {
    std::string save;    //!< --save DIR ("" : no saving)
    int every = 0;       //!< --save-every N
    int keep = 0;        //!< --keep K (0: all)
    std::string resume;  //!< --resume DIR ("" : fresh start)
};

//! Where the training state is: what a resume restores besides the tensors.
struct training_position {
    std::int64_t step = 0;                     //!< steps done
    std::vector<std::uint64_t> data_streams;  //!< every replica's data RNG, after `step` batches
    std::string run;                           //!< the run that saved it ("" before run ids)
};

//! This process's part in saving.
struct checkpoint_place {
    std::vector<int> stage_rank;  //!< pipeline rank of every stage
    int ranks = 1;
    int my_rank = -1;             //!< the pipeline rank whose shard this process writes; -1: every rank's
    int replicas = 1;             //!< data-parallel replicas in the job
    bool sharded = false;         //!< --shard-optimizer: every replica writes its moments' shard
    tensor_split tensor{};        //!< --tp: this process's tensor rank; each writes its share
    bool leader = true;           //!< writes the manifest and commits
    std::string run{};            //!< the run continued (--resume: its checkpoint's run); "": a new run
    std::function<void()> barrier{};
    tpipe::json::value shape{};   //!< how this run is laid out (recorded for information)
};

//! The JSON of the model config a checkpoint must match.
tpipe::json::value model_json(const config& c);

class checkpointer {
public:
    checkpointer(const checkpoint_flags& f, checkpoint_place place, const config& cfg, const adamw_options& opt,
                 std::uint64_t seed);
    //! After the optimizer step of `step`: starts a save every --save-every steps (committing the
    //! previous one first, so a save overlaps the next step's training).
    //! `replicas[d]`: replica d's state, null where another process holds it.
    void after_step(std::int64_t step, const std::vector<stage_states<float>*>& replicas,
                    const std::vector<std::uint64_t>& streams);
    //! Commits the save in progress; call at the end of the run (and after the last step's save).
    void finish() { out_.finish(); }
    //! Starts a save of `step` now.
    void save(std::int64_t step, const std::vector<stage_states<float>*>& replicas, const std::vector<std::uint64_t>& streams);

private:
    checkpoint_flags f_;
    checkpoint_place place_;
    config cfg_;
    adamw_options opt_;
    std::uint64_t seed_;
    tpipe::state::checkpoint_writer out_;
};

//! Loads the checkpoint at `path` (a run directory or one checkpoint) into the stages held in `s`.
//! Throws a tpipe::state::checkpoint_error naming the file for a missing, damaged or
//! half-written checkpoint, or one of another model config or optimizer.
training_position load_checkpoint(const std::string& path, const config& cfg, const adamw_options& o,
                                  stage_states<float>& s);

//! An elastic run's checkpoints, written by the process that holds replica 0 (`writes`).
class elastic_checkpointer {
public:
    //! `measured`: the unit times the run plans with (saved, so that a resume plans alike);
    //! `run`: the run continued (saved_elastic_run::run), "" for a new run.
    elastic_checkpointer(const checkpoint_flags& f, const config& cfg, const adamw_options& opt, std::uint64_t seed,
                         tpipe::elastic::unit_seconds measured, bool writes, const std::string& run);
    //! After the optimizer step that made `done` steps, under `plan`: a save every --save-every
    //! steps (committing the previous one first, so a save overlaps the next step's training).
    void after_step(std::int64_t done, const tpipe::elastic::replan_record& plan, const parameters<float>& p,
                    adamw<float>& opt);
    //! A run stopped after `done` steps (a signal): saves that step unless it was saved (`p` and
    //! `opt` still hold it), then commits. True if a checkpoint of that step is on disk.
    bool save_stopped(std::int64_t done, const parameters<float>& p, adamw<float>& opt);
    //! Commits the save in progress; call at the end of the run.
    void finish()
    {
        if (out_) out_->finish();
    }

private:
    void save(std::int64_t done, const tpipe::elastic::replan_record& plan, const parameters<float>& p, adamw<float>& opt);

    checkpoint_flags f_;
    config cfg_;
    adamw_options opt_;
    std::uint64_t seed_;
    tpipe::elastic::unit_seconds measured_;
    std::optional<tpipe::state::checkpoint_writer> out_;  // where this process saves
    std::int64_t last_done_ = -1, last_saved_ = -1;
    tpipe::elastic::replan_record last_plan_;
};

//! What a resume needs before it builds anything: the steps the elastic run that saved `path`
//! trained, and the unit times it planned with. A resumed run plans with them, so that its
//! re-plans choose what the uninterrupted run chose (measured again, they differ, and so may the
//! microbatches and replicas, and with them the trained bits).
struct saved_elastic_run {
    std::int64_t steps_done = 0;
    tpipe::elastic::unit_seconds measured;
    std::string run;  //!< the run that saved it ("" before run ids)
};
saved_elastic_run read_saved_elastic_run(const std::string& path, int units);

//! Loads an elastic run's checkpoint at `path` into the whole model `p` and its optimizer `opt`
//! (fresh): freezes the saved layers and reads every parameter and the active layers' moments.
//! Returns where the run continues. Refuses a non-elastic checkpoint (its data order is not the
//! elastic sampler's) and everything load_checkpoint refuses.
tpipe::elastic::resume_point load_elastic_checkpoint(const std::string& path, const config& cfg, const adamw_options& o,
                                                     parameters<float>& p, adamw<float>& opt);

} // namespace gpt
