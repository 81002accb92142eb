#pragma once
// The directory of a run's checkpoints: committed ones are step-NNNNNNNN/ (each with its
// manifest), a save in progress is .partial-step-NNNNNNNN/ until one rename commits it. A crash
// at any moment leaves every committed checkpoint whole; a leftover partial directory is never
// read, and the next save of the run removes it.
//
// A directory holds one run's checkpoints (each manifest names its run): keep-K deletes only
// checkpoints of the committing run, never one newer than the step it commits, and never
// through a symbolic link (a step-* that is a link is not a checkpoint of the directory).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "tpipe/core/file.hpp"
#include "tpipe/state/durable_file.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/manifest.hpp"

namespace tpipe::state {

class checkpoint_directory {
public:
    explicit checkpoint_directory(std::string root) : root_(std::move(root)) {}
    const std::string& root() const { return root_; }

    static std::string committed_name(std::int64_t step) { return name("step-", step); }
    static std::string partial_name(std::int64_t step) { return name(".partial-step-", step); }
    std::string committed_path(std::int64_t step) const { return root_ + "/" + committed_name(step); }
    std::string partial_path(std::int64_t step) const { return root_ + "/" + partial_name(step); }

    //! Steps of the committed checkpoints (directories, not links, with a manifest or one that
    //! cannot be told absent), ascending.
    std::vector<std::int64_t> committed() const { return steps("step-", true); }
    //! Steps of the saves that never committed.
    std::vector<std::int64_t> partial() const { return steps(".partial-step-", false); }

    //! Starts the save of `step`: removes leftovers of interrupted saves, creates the partial
    //! directory (empty) and returns its path. Run by one process.
    std::string prepare(std::int64_t step) const
    {
        namespace fs = std::filesystem;
        std::error_code ec;
        create();
        for (auto s : partial()) fs::remove_all(partial_path(s), ec);
        const std::string p = partial_path(step);
        if (!fs::create_directory(p, ec) || ec)
            throw write_error("cannot create \"" + p + "\": " + (ec ? ec.message() : "it exists"));
        return p;
    }

    //! Creates the directory (and its parents) if needed; throws write_error naming it.
    void create() const
    {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (root_.empty()) throw write_error("the checkpoint directory's name is empty");
        const auto st = fs::status(root_, ec);
        if (fs::exists(st) && !fs::is_directory(st))
            throw write_error("cannot create the checkpoint directory \"" + root_ + "\": it exists and is not a directory");
        fs::create_directories(root_, ec);
        if (ec) throw write_error("cannot create the checkpoint directory \"" + root_ + "\": " + ec.message());
    }

    //! The run that committed checkpoint directory `dir` ("" : one written before run ids), or
    //! nothing when its manifest cannot be read.
    static std::optional<std::string> run_of(const std::string& dir)
    {
        try {
            const json::value v = json::parse(read_file(dir + "/" + manifest_file, "checkpoint manifest"));
            return v.contains("run") ? v.at("run").as_string("run") : std::string();
        } catch (const error&) {
            return std::nullopt;
        }
    }

    //! The first committed checkpoint here that is not of run `run`, described for a refusal
    //! ("step-00000004 of run 0123...", "... written before run ids", "... whose manifest cannot
    //! be read"); nothing when every one is this run's.
    std::optional<std::string> other_run(const std::string& run) const
    {
        for (auto s : committed()) {
            const auto r = run_of(committed_path(s));
            if (r && *r == run) continue;
            return committed_name(s) + (!r ? " (its manifest cannot be read)"
                                        : r->empty() ? " (written before runs were recorded)"
                                                     : " of run " + *r);
        }
        return std::nullopt;
    }

    //! Commits the save of `step` by run `run` (its manifest already written in the partial
    //! directory) by one rename, made durable. Then, with `keep` > 0, deletes this run's
    //! checkpoints older than its newest `keep` up to `step`: another run's, one whose run cannot
    //! be read, and one newer than `step` (left by this run before a resume from an older step)
    //! are kept. Run by one process.
    void commit(std::int64_t step, int keep, const std::string& run) const
    {
        namespace fs = std::filesystem;
        const std::string from = partial_path(step), to = committed_path(step);
        sync_directory(from);
        std::error_code ec;
        // The same step saved again (a resume from an older checkpoint): the old copy steps
        // aside, so the name always points at a whole checkpoint. Only this run's own checkpoint
        // is replaced: a link, a file or another directory of that name is the user's, never deleted.
        const std::string aside = root_ + "/" + name(".replaced-step-", step);
        const auto there = fs::symlink_status(to, ec);
        if (fs::exists(there) && !(fs::is_directory(there) && run_of(to) == run))
            throw write_error("cannot commit step " + std::to_string(step) + ": \"" + to + "\" exists and is " +
                              (fs::is_symlink(there)     ? std::string("a symbolic link")
                               : fs::is_regular_file(there) ? std::string("a regular file")
                               : fs::is_directory(there)    ? std::string("not a checkpoint of this run")
                                                            : std::string(tpipe::detail::file_kind(there.type()))) +
                              "; move it away, or save into another directory (the checkpoints committed before are whole)");
        if (fs::exists(there)) {
            fs::remove_all(aside, ec);
            fs::rename(to, aside, ec);
            if (ec) throw write_error("cannot move \"" + to + "\" aside: " + ec.message());
        }
        fs::rename(from, to, ec);
        if (ec) throw write_error("cannot commit \"" + from + "\" as \"" + to + "\": " + ec.message());
        sync_directory(root_);
        fs::remove_all(aside, ec);
        if (keep > 0) {
            std::vector<std::int64_t> mine;
            for (auto s : committed())
                if (s <= step && run_of(committed_path(s)) == run) mine.push_back(s);
            for (std::size_t k = 0; k + static_cast<std::size_t>(keep) < mine.size(); ++k)
                fs::remove_all(committed_path(mine[k]), ec);  // a real directory: remove_all follows no link
        }
    }

    //! The checkpoint directory a resume from `path` reads: `path` itself when it is one
    //! checkpoint, else the newest committed checkpoint under it. Refuses, naming the path, a
    //! half-written checkpoint, a run directory with only half-written ones, or anything else.
    static std::string resolve(const std::string& path)
    {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (path.empty()) throw not_a_checkpoint("checkpoint path is empty: name a checkpoint or a save directory");
        const auto st = fs::status(path, ec);
        if (ec && ec != std::errc::no_such_file_or_directory)
            throw corrupt_checkpoint("checkpoint path \"" + path + "\": cannot be read: " + ec.message());
        if (!fs::is_directory(st))
            throw not_a_checkpoint("checkpoint path \"" + path + "\": " +
                                   (!fs::exists(st)            ? std::string("does not exist")
                                    : fs::is_regular_file(st) ? std::string("is a file, not a checkpoint directory")
                                                              : "is " + std::string(tpipe::detail::file_kind(st.type())) +
                                                                    ", not a checkpoint directory"));
        const bool has_manifest = fs::exists(fs::symlink_status(fs::path(path) / manifest_file, ec));
        if (ec && ec != std::errc::no_such_file_or_directory)  // a directory of mode 000, say
            throw corrupt_checkpoint("checkpoint directory \"" + path + "\" cannot be read: " + ec.message());
        if (has_manifest) return path;
        const std::string base = fs::path(path).lexically_normal().filename().string();
        if (base.rfind(".partial-step-", 0) == 0 || has_shards(path))
            throw incomplete_checkpoint("\"" + path + "\" is a half-written checkpoint (no " + manifest_file +
                                        ": the save was interrupted before its commit); resume from the run directory "
                                        "or a committed step-* checkpoint");
        checkpoint_directory d(path);
        const auto done = d.committed();
        if (!done.empty()) return d.committed_path(done.back());
        if (!d.partial().empty())
            throw incomplete_checkpoint("\"" + path + "\" holds only a half-written checkpoint (" +
                                        partial_name(d.partial().back()) + "), no committed one to resume from");
        throw not_a_checkpoint("\"" + path + "\" is not a checkpoint: it has no " + manifest_file +
                               " and no step-* checkpoint directory");
    }

private:
    std::string root_;

    static std::string name(const char* prefix, std::int64_t step)
    {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%08lld", prefix, static_cast<long long>(step));
        return buf;
    }
    static bool has_shards(const std::string& dir)
    {
        std::error_code ec;
        for (const auto& e : std::filesystem::directory_iterator(dir, ec))
            if (e.path().extension() == ".bin") return true;
        return false;
    }
    std::vector<std::int64_t> steps(const std::string& prefix, bool with_manifest) const
    {
        namespace fs = std::filesystem;
        std::vector<std::int64_t> out;
        std::error_code ec;
        if (!fs::is_directory(root_, ec)) return out;
        for (const auto& e : fs::directory_iterator(root_, ec)) {
            const std::string n = e.path().filename().string();
            if (n.rfind(prefix, 0) != 0 || n.size() == prefix.size()) continue;
            const std::string digits = n.substr(prefix.size());
            if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 15) continue;
            std::error_code tec;
            if (!e.is_directory(tec) || e.is_symlink(tec)) continue;  // a link or a file is not one of ours
            std::error_code mec;
            const bool manifest = fs::exists(fs::symlink_status(e.path() / manifest_file, mec));
            // Unreadable (mode 000): listed, so that reading it says why, and never deleted.
            if (with_manifest && !manifest && (!mec || mec == std::errc::no_such_file_or_directory)) continue;
            out.push_back(std::stoll(digits));
        }
        std::sort(out.begin(), out.end());
        return out;
    }
};

} // namespace tpipe::state
