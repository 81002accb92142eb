#pragma once
// The refusals of checkpoint loading and saving. Each names the file or directory and what is
// wrong with it; none is thrown after anything was overwritten (a save writes only under a
// temporary name until its one atomic rename).
#include <string>

#include "tpipe/core/error.hpp"

namespace tpipe::state {

//! Base of every checkpoint refusal.
class checkpoint_error : public error {
public:
    using error::error;
};

//! The directory holds no checkpoint at all (no manifest, no step directory).
class not_a_checkpoint : public checkpoint_error {
public:
    using checkpoint_error::checkpoint_error;
};

//! A save that never committed: a temporary directory, or shards without a manifest.
class incomplete_checkpoint : public checkpoint_error {
public:
    using checkpoint_error::checkpoint_error;
};

//! A shard or manifest that is missing, truncated, unreadable or fails its checksum.
class corrupt_checkpoint : public checkpoint_error {
public:
    using checkpoint_error::checkpoint_error;
};

//! A whole checkpoint of another format version, model or layout than the loader asks for.
class incompatible_checkpoint : public checkpoint_error {
public:
    using checkpoint_error::checkpoint_error;
};

//! Writing failed (disk full, permissions); the previous checkpoint is untouched.
class write_error : public checkpoint_error {
public:
    using checkpoint_error::checkpoint_error;
};

//! A save directory this run may not save into: another job holds its lock, or it holds
//! checkpoints of another run (which this run's saves and --keep would mix with or delete).
class directory_conflict : public checkpoint_error {
public:
    using checkpoint_error::checkpoint_error;
};

} // namespace tpipe::state
