#pragma once
// Saving a checkpoint from one process or many. A save is begun with the state already copied
// into host buffers (shard_snapshot); a background thread writes and fsyncs this process's
// shards, each with a small record of its size, checksum and ranges. finish() (the next save,
// or the end of the run) waits for them, meets the other processes at a barrier, and the
// leader then writes the manifest from the records and commits the directory by one rename.
//
// With several processes, every one calls begin() and finish() for the same steps in the same
// order, and `barrier` is a barrier of all of them (for example a communicator's). Until the
// commit nothing is named as a checkpoint, so a crash at any point leaves the previous one whole.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/file.hpp"
#include "tpipe/state/background_writer.hpp"
#include "tpipe/state/checkpoint_directory.hpp"
#include "tpipe/state/directory_lock.hpp"
#include "tpipe/state/durable_file.hpp"
#include "tpipe/state/manifest.hpp"
#include "tpipe/state/run_id.hpp"
#include "tpipe/state/shard_snapshot.hpp"

namespace tpipe::state {

struct writer_options {
    std::string root;                 //!< the run's checkpoint directory (created if needed)
    int keep = 0;                     //!< newest checkpoints of this run kept (0: all)
    std::string run{};                //!< the run's identity: a resumed run's manifest.run; "": a new run
    bool leader = true;               //!< this process writes the manifest and commits
    int shards = 1;                   //!< shards of one checkpoint over all processes
    std::function<void()> barrier{};  //!< of all processes (none: a single process)
};

class checkpoint_writer {
public:
    //! On the leader: creates the directory and locks it for this writer's lifetime, and refuses
    //! (directory_conflict) a directory another job holds or one with another run's checkpoints.
    explicit checkpoint_writer(writer_options o) : o_(std::move(o)), dir_(o_.root)
    {
        if (o_.keep < 0) throw invalid_argument("checkpoint_writer: keep must be >= 0 (0 keeps all)");
        if (o_.shards < 1) throw invalid_argument("checkpoint_writer: a checkpoint needs at least one shard");
        o_.run = o_.run.empty() ? new_run_id() : run_id(o_.run, "checkpoint_writer: run");
        if (!o_.leader) return;
        dir_.create();
        lock_.emplace(o_.root);
        if (const auto other = dir_.other_run(o_.run))
            throw directory_conflict("checkpoint directory \"" + o_.root + "\" holds " + *other +
                                     ", not of this run (" + o_.run +
                                     "): saving there would mix two runs' checkpoints (and pruning old checkpoints delete the other's); "
                                     "resume that run from it, or save into another directory");
    }

    checkpoint_writer(const checkpoint_writer&) = delete;
    checkpoint_writer& operator=(const checkpoint_writer&) = delete;

    //! A save still in progress is not committed here (the commit meets the other processes at
    //! the barrier, which they may never reach, and may fail, which a destructor cannot throw):
    //! its background write is waited for, and the lost save, with its error if the write
    //! failed, is reported on stderr. Call finish() to commit it.
    ~checkpoint_writer()
    {
        if (!pending_) return;
        std::string why;
        try {
            bg_.wait();
        } catch (const std::exception& e) {
            why = std::string("; its write had failed: ") + e.what();
        } catch (...) {
            why = "; its write had failed";
        }
        std::fprintf(stderr,
                     "tpipe: checkpoint_writer destroyed with the save of step %lld in progress: not committed, "
                     "\"%s\" holds the previous checkpoints only%s (call finish() before the writer ends)\n",
                     static_cast<long long>(pending_->step), o_.root.c_str(), why.c_str());
    }

    //! Starts saving `m` (every section filled but the shards) with this process's shards.
    //! Finishes the previous save first. Refuses a step outside 0 .. 2^53 - 1.
    void begin(manifest m, std::vector<shard_snapshot> mine)
    {
        if (m.step < 0 || m.step > field::max_integer)
            throw invalid_argument("checkpoint_writer::begin: step " + std::to_string(m.step) +
                                   " must be in 0.." + std::to_string(field::max_integer) + " (optimizer steps taken)");
        finish();
        if (o_.leader) dir_.prepare(m.step);
        barrier();
        const std::string at = dir_.partial_path(m.step);
        pending_ = std::move(m);
        pending_->run = o_.run;
        bg_.start([at, mine = std::move(mine)] {
            for (const auto& s : mine) {
                const std::string record = json::dump(shard_json(s.write(at)));
                const std::span<const std::byte> bytes = std::as_bytes(std::span<const char>(record));
                write_durably(at + "/." + s.file() + ".entry", std::span<const std::span<const std::byte>>(&bytes, 1));
            }
        });
    }

    //! Completes the save in progress (if any): its shards are on disk everywhere and, on the
    //! leader, the checkpoint is committed when this returns.
    void finish()
    {
        if (!pending_) return;
        manifest m = std::move(*pending_);
        pending_.reset();
        bg_.wait();
        barrier();
        if (!o_.leader) return;
        const std::string at = dir_.partial_path(m.step);
        namespace fs = std::filesystem;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(at, ec)) {
            const std::string n = e.path().filename().string();
            if (n.size() < 7 || n.front() != '.' || n.substr(n.size() - 6) != ".entry") continue;
            m.shards.push_back(shard_from_json(json::parse(read_file(e.path().string(), "shard record")), n));
        }
        if (static_cast<int>(m.shards.size()) != o_.shards)
            throw write_error("checkpoint \"" + at + "\": " + std::to_string(m.shards.size()) + " of " +
                              std::to_string(o_.shards) + " shards were written; not committing it");
        std::sort(m.shards.begin(), m.shards.end(), [](const auto& a, const auto& b) { return a.file < b.file; });
        try {
            check_layout(m.shards);  // what a reader would refuse is not committed
        } catch (const error& e) {
            throw write_error("checkpoint \"" + at + "\": the shards' layout is wrong, not committing it: " + e.what());
        }
        for (const auto& s : m.shards) fs::remove(at + "/." + s.file + ".entry", ec);
        m.format = checkpoint_format_version;
        const std::string text = m.text();
        const std::span<const std::byte> bytes = std::as_bytes(std::span<const char>(text));
        write_durably(at + "/" + manifest_file, std::span<const std::span<const std::byte>>(&bytes, 1));
        dir_.commit(m.step, o_.keep, o_.run);
        last_committed_ = m.step;
    }

    bool saving() const { return pending_.has_value(); }
    //! The step of the last checkpoint this (leader) process committed, or -1.
    std::int64_t last_committed() const { return last_committed_; }
    const checkpoint_directory& directory() const { return dir_; }
    //! This run's identity, recorded in every manifest it writes.
    const std::string& run() const { return o_.run; }

private:
    void barrier()
    {
        if (o_.barrier) o_.barrier();
    }

    writer_options o_;
    checkpoint_directory dir_;
    std::optional<directory_lock> lock_;  // the leader's, while it may save
    background_writer bg_;
    std::optional<manifest> pending_;
    std::int64_t last_committed_ = -1;
};

} // namespace tpipe::state
