#pragma once
// A shard's state copied into host memory: the named ranges a process owns, packed one after
// the other. Taking the snapshot is the only part of a save that stops training; writing it
// (with its checksum, and fsync) can then run on a background thread while training goes on.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/state/checksum.hpp"
#include "tpipe/state/dtype.hpp"
#include "tpipe/state/durable_file.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/manifest.hpp"
#include "tpipe/state/named_range.hpp"

namespace tpipe::state {

class shard_snapshot {
public:
    //! `file`: the shard's name inside the checkpoint directory (a plain name, e.g. "rank-0.bin").
    explicit shard_snapshot(std::string file) : file_(std::move(file))
    {
        if (file_.empty() || file_.find('/') != std::string::npos || file_[0] == '.')
            throw invalid_argument("shard name \"" + file_ + "\" must be a plain file name not starting with '.'");
    }

    //! Copies `data` as elements [begin, begin + data.size()) of tensor `name` of `shape`.
    template <stored_element T>
    void add(std::string name, std::vector<std::int64_t> shape, std::int64_t begin, std::span<const T> data)
    {
        named_range r{std::move(name), dtype_name<T>(), std::move(shape), begin,
                      begin + static_cast<std::int64_t>(data.size()), static_cast<std::int64_t>(bytes_.size())};
        if (begin < 0 || r.end > r.elements())
            throw invalid_argument("shard " + file_ + ": range [" + std::to_string(begin) + ", " + std::to_string(r.end) +
                                   ") does not fit tensor \"" + r.name + "\" of " + std::to_string(r.elements()) +
                                   " elements");
        for (const auto& o : ranges_)
            if (o.name == r.name && o.begin < r.end && r.begin < o.end)
                throw invalid_argument("shard " + file_ + ": tensor \"" + r.name + "\" is added twice over one range");
        const auto raw = std::as_bytes(data);
        bytes_.insert(bytes_.end(), raw.begin(), raw.end());
        ranges_.push_back(std::move(r));
    }

    //! Reserves room for `bytes` in all, so that adding copies each byte once. Throws write_error
    //! naming the shard and the size when host memory cannot hold the snapshot.
    void reserve(std::size_t bytes)
    {
        try {
            bytes_.reserve(bytes);
        } catch (const std::bad_alloc&) {
            throw write_error("checkpoint shard " + file_ + ": cannot allocate " + std::to_string(bytes >> 20) +
                              " MiB of host memory for its snapshot (out of memory, or a ulimit -v limit)");
        } catch (const std::length_error&) {
            throw write_error("checkpoint shard " + file_ + ": " + std::to_string(bytes) + " bytes is too large a snapshot");
        }
    }

    const std::string& file() const { return file_; }
    std::size_t bytes() const { return bytes_.size(); }
    const std::vector<named_range>& ranges() const { return ranges_; }

    //! Writes the shard into directory `dir` (fsynced) and returns its manifest entry.
    shard_entry write(const std::string& dir) const
    {
        const std::span<const std::byte> all(bytes_);
        write_durably(dir + "/" + file_, std::span<const std::span<const std::byte>>(&all, 1));
        checksum sum;
        sum.update(all);
        return shard_entry{file_, static_cast<std::int64_t>(bytes_.size()), sum.value(), ranges_};
    }

private:
    std::string file_;
    std::vector<std::byte> bytes_;
    std::vector<named_range> ranges_;
};

} // namespace tpipe::state
