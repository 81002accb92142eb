#pragma once
// The directory of a run's checkpoints: committed ones are step-NNNNNNNN/ (each with its
// manifest), a save in progress is .partial-step-NNNNNNNN/ until one rename commits it. A crash
// at any moment leaves every committed checkpoint whole; a leftover partial directory is never
// read, and the next save of the run removes it.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

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

    //! Steps of the committed checkpoints (those with a manifest), ascending.
    std::vector<std::int64_t> committed() const { return steps("step-", true); }
    //! Steps of the saves that never committed.
    std::vector<std::int64_t> partial() const { return steps(".partial-step-", false); }

    //! Starts the save of `step`: removes leftovers of interrupted saves, creates the partial
    //! directory (empty) and returns its path. Run by one process.
    std::string prepare(std::int64_t step) const
    {
        namespace fs = std::filesystem;
        std::error_code ec;
        fs::create_directories(root_, ec);
        if (ec) throw write_error("cannot create the checkpoint directory \"" + root_ + "\": " + ec.message());
        for (auto s : partial()) fs::remove_all(partial_path(s), ec);
        const std::string p = partial_path(step);
        if (!fs::create_directory(p, ec) || ec)
            throw write_error("cannot create \"" + p + "\": " + (ec ? ec.message() : "it exists"));
        return p;
    }

    //! Commits the save of `step` (its manifest already written in the partial directory) by one
    //! rename, made durable; then keeps the newest `keep` checkpoints (0: all). Run by one process.
    void commit(std::int64_t step, int keep) const
    {
        namespace fs = std::filesystem;
        const std::string from = partial_path(step), to = committed_path(step);
        sync_directory(from);
        std::error_code ec;
        // The same step saved again (a resume from an older checkpoint): the old copy steps
        // aside, so the name always points at a whole checkpoint.
        const std::string aside = root_ + "/" + name(".replaced-step-", step);
        if (fs::exists(to, ec)) {
            fs::remove_all(aside, ec);
            fs::rename(to, aside, ec);
            if (ec) throw write_error("cannot move \"" + to + "\" aside: " + ec.message());
        }
        fs::rename(from, to, ec);
        if (ec) throw write_error("cannot commit \"" + from + "\" as \"" + to + "\": " + ec.message());
        sync_directory(root_);
        fs::remove_all(aside, ec);
        if (keep > 0) {
            auto all = committed();
            for (std::size_t k = 0; k + static_cast<std::size_t>(keep) < all.size(); ++k)
                fs::remove_all(committed_path(all[k]), ec);
        }
    }

    //! The checkpoint directory a resume from `path` reads: `path` itself when it is one
    //! checkpoint, else the newest committed checkpoint under it. Refuses, naming the path, a
    //! half-written checkpoint, a run directory with only half-written ones, or anything else.
    static std::string resolve(const std::string& path)
    {
        namespace fs = std::filesystem;
        std::error_code ec;
        if (!fs::is_directory(path, ec))
            throw not_a_checkpoint("--resume \"" + path + "\": " +
                                   (fs::exists(path, ec) ? "is a file, not a checkpoint directory" : "does not exist"));
        if (fs::exists(fs::path(path) / manifest_file, ec)) return path;
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
            if (with_manifest && !fs::exists(e.path() / manifest_file, ec)) continue;
            out.push_back(std::stoll(digits));
        }
        std::sort(out.begin(), out.end());
        return out;
    }
};

} // namespace tpipe::state
