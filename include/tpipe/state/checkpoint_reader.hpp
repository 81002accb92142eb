#pragma once
// Loading a checkpoint, resharded: the reader checks the manifest and every shard (size and
// checksum) when it opens, then serves any element range of any named tensor, gathered from
// whichever shards hold its pieces. A loader with another sharding (other stages, replicas or
// optimizer shards) asks for exactly the ranges it owns.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>  // std::cmp_greater
#include <vector>

#include "tpipe/core/file.hpp"
#include "tpipe/state/checkpoint_directory.hpp"
#include "tpipe/state/dtype.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/manifest.hpp"
#include "tpipe/state/shard_reader.hpp"

namespace tpipe::state {

class checkpoint_reader {
public:
    //! `path`: one checkpoint, or a run directory (its newest committed checkpoint is read).
    //! Throws not_a_checkpoint, incomplete_checkpoint, corrupt_checkpoint or
    //! incompatible_checkpoint (format version), each naming the file.
    explicit checkpoint_reader(const std::string& path) : dir_(checkpoint_directory::resolve(path))
    {
        const std::string mpath = dir_ + "/" + manifest_file;
        std::string text;
        try {
            text = read_file(mpath, "checkpoint manifest");
        } catch (const error& e) {
            throw corrupt_checkpoint(e.what());
        }
        m_ = manifest::parse(text, mpath);
        for (const auto& s : m_.shards) shards_.push_back(std::make_unique<shard_reader>(dir_, s));
    }

    const std::string& path() const { return dir_; }
    const manifest& contents() const { return m_; }

    bool has(const std::string& name) const
    {
        for (const auto& s : m_.shards)
            for (const auto& r : s.ranges)
                if (r.name == name) return true;
        return false;
    }

    //! Shape of tensor `name`; throws incompatible_checkpoint if the checkpoint has no such tensor.
    std::vector<std::int64_t> shape(const std::string& name) const { return find(name).shape; }

    //! Reads elements [begin, begin + out.size()) of tensor `name` into `out`. Throws
    //! incompatible_checkpoint when the tensor is absent, of another dtype, or not wholly held.
    template <stored_element T>
    void read(const std::string& name, std::int64_t begin, std::span<T> out) const
    {
        const named_range& any = find(name);
        if (any.dtype != dtype_name<T>())
            throw incompatible_checkpoint("checkpoint \"" + dir_ + "\": tensor \"" + name + "\" is " + any.dtype +
                                          ", asked for as " + dtype_name<T>());
        // Checked: a begin near INT64_MAX must be refused, not wrap to a small end.
        const std::int64_t elements = any.elements();
        if (begin < 0 || begin > elements || std::cmp_greater(out.size(), elements - begin))
            throw incompatible_checkpoint("checkpoint \"" + dir_ + "\": elements [" + std::to_string(begin) + ", " +
                                          std::to_string(begin) + " + " + std::to_string(out.size()) +
                                          ") lie outside tensor \"" + name + "\" of " + std::to_string(elements));
        const std::int64_t end = begin + static_cast<std::int64_t>(out.size());
        std::vector<std::pair<std::int64_t, std::int64_t>> got;
        for (const auto& sh : shards_)
            for (const auto& r : sh->entry().ranges) {
                if (r.name != name) continue;  // the manifest's check: one dtype and shape per tensor
                const std::int64_t lo = std::max(begin, r.begin), hi = std::min(end, r.end);
                if (lo >= hi) continue;
                const auto bytes = std::as_writable_bytes(out.subspan(static_cast<std::size_t>(lo - begin),
                                                                      static_cast<std::size_t>(hi - lo)));
                sh->read_at(r.offset + (lo - r.begin) * static_cast<std::int64_t>(sizeof(T)), bytes);
                got.emplace_back(lo, hi);
            }
        std::sort(got.begin(), got.end());
        std::int64_t covered = begin;
        for (const auto& [lo, hi] : got)
            if (lo <= covered) covered = std::max(covered, hi);
        if (covered < end)
            throw incompatible_checkpoint("checkpoint \"" + dir_ + "\": no shard holds elements from " +
                                          std::to_string(covered) + " of tensor \"" + name + "\" (asked [" +
                                          std::to_string(begin) + ", " + std::to_string(end) + "))");
    }

    //! Reads the whole tensor `name`, which must have `shape`.
    template <stored_element T>
    void read_tensor(const std::string& name, const std::vector<std::int64_t>& want, std::span<T> out) const
    {
        const auto have = shape(name);
        if (have != want)
            throw incompatible_checkpoint("checkpoint \"" + dir_ + "\": tensor \"" + name + "\" has shape " +
                                          text(have) + ", the model has " + text(want));
        read(name, 0, out);
    }

private:
    std::string dir_;
    manifest m_;
    std::vector<std::unique_ptr<shard_reader>> shards_;

    const named_range& find(const std::string& name) const
    {
        for (const auto& s : m_.shards)
            for (const auto& r : s.ranges)
                if (r.name == name) return r;
        throw incompatible_checkpoint("checkpoint \"" + dir_ + "\" has no tensor \"" + name + "\"");
    }
    static std::string text(const std::vector<std::int64_t>& s)
    {
        std::string t = "[";
        for (std::size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
        return t + "]";
    }
};

} // namespace tpipe::state
