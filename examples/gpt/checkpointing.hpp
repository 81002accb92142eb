#pragma once
// train_gpt's checkpoints, on tpipe/state: the reference GPT's parameters and AdamW moments as
// named ranges ("param/h.0.attn.w_qkv", "adamw.m/...", "adamw.v/..."), one shard per pipeline
// rank holding the tensors of that rank's stages (written by the process running that rank of
// replica 0, from its stage-local state), and the step, optimizer, data streams and run shape in
// the manifest. A resume reads every tensor a stage holds by name, whatever stages, cuts,
// replicas or transport saved it. A tied LM head is saved once, as the embedding "wte"; the last
// stage's copy of it is read from there (the copies are equal: they take the same steps).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <tpipe/core/json.hpp>
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
};

//! This process's part in saving.
struct checkpoint_place {
    std::vector<int> stage_rank;  //!< pipeline rank of every stage
    int ranks = 1;
    int my_rank = -1;             //!< the pipeline rank whose shard this process writes; -1: every rank's
    bool writes = true;           //!< holds replica 0 (the others only meet at the barriers)
    bool leader = true;           //!< writes the manifest and commits
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
    void after_step(std::int64_t step, stage_states<float>& s, const std::vector<std::uint64_t>& streams);
    //! Commits the save in progress; call at the end of the run (and after the last step's save).
    void finish() { out_.finish(); }
    //! Starts a save of `step` now.
    void save(std::int64_t step, stage_states<float>& s, const std::vector<std::uint64_t>& streams);

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

} // namespace gpt
