#pragma once
// tpipe::elastic::activation_cache: AutoCache's store. Per sample id, the output of the frozen
// prefix at some freeze level (the number of frozen layers it went through), kept in host memory
// up to a byte budget and spilled to disk beyond it.
//
//   tpipe::elastic::activation_cache<act> cache({.host_bytes = 64 << 20});
//   if (auto hit = cache.get(id)) {            // hit->level layers already applied
//       x = hit->level == F ? std::move(hit->value) : run_layers(hit->value, hit->level, F);
//   } else x = run_layers(embed(id), 0, F);
//   cache.put(id, F, x);                        // replaces the entry's older level
//
// - Payloads are any tpipe::byte_payload (tpipe/transport/payload_traits.hpp): the header and the
//   bytes are stored, make(header) and a copy of the bytes rebuild the value, so a hit is bitwise
//   the value that was put.
// - One entry per sample: a put at a higher level replaces the lower one (an older level is only
//   ever the base of an extension F_prev -> F, never read again), so the cache holds at most one
//   payload per sample. A put at a lower level than the entry's is refused: freezing is monotone.
// - Host memory first; an entry that would take the host bytes past options::host_bytes goes to
//   a private spill file (created on the first spill under options::spill_parent and unlinked
//   at once, so that nothing is left on disk however the process ends: SIGINT, SIGTERM, SIGKILL;
//   an entry keeps its place in the file when a deeper level of the same size replaces it).
// - Thread-safe (one mutex): the replicas of one process share one cache, so a replica that takes
//   over a sample after a re-shard finds what another computed.
// - Across processes of one machine: with options::shared_directory, every entry is a file in
//   that directory (level, header and bytes; written to a temporary name and renamed, so a
//   reader never sees half an entry), and a miss in memory looks there, so the processes that
//   give the same directory share their entries (the host budget then bounds nothing: the
//   operating system's page cache holds the files). The directory belongs to the caller, who
//   creates it before and removes it after. Two processes must not put the same sample at the
//   same time (training gives each sample of a step to one replica).
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/payload_traits.hpp"

namespace tpipe::elastic {

struct cache_options {
    std::size_t host_bytes = std::size_t{256} << 20;  //!< host-memory budget for payload bytes
    std::filesystem::path spill_parent{};             //!< where the spill directory goes (empty: the system temp dir)
    std::filesystem::path shared_directory{};         //!< non-empty: entries are files here, shared between processes
};

//! What the cache holds and did, for logs and tests.
struct cache_stats {
    std::int64_t hits = 0, misses = 0;
    std::int64_t host_entries = 0, disk_entries = 0;
    std::size_t host_bytes = 0, disk_bytes = 0;
};

template <byte_payload T>
class activation_cache {
    using traits = payload_traits<T>;
    using header = typename traits::header;
    static_assert(std::is_trivially_copyable_v<header>, "a cached payload's header must be trivially copyable");

public:
    //! A cached value and the freeze level it was computed at.
    struct hit {
        int level = 0;
        T value;
    };

    explicit activation_cache(cache_options o = {}) : opts_(std::move(o))
    {
        if (!opts_.shared_directory.empty()) {
            if (!std::filesystem::is_directory(opts_.shared_directory))
                throw invalid_argument("activation_cache: the shared directory '" + opts_.shared_directory.string() +
                                       "' does not exist; create it before the caches that share it");
            dir_ = opts_.shared_directory;
        }
    }
    activation_cache(const activation_cache&) = delete;
    activation_cache& operator=(const activation_cache&) = delete;
    ~activation_cache()
    {
        if (fd_ >= 0) ::close(fd_);
    }

    //! The entry of sample `id` (its level and a copy of its value), or nothing.
    std::optional<hit> get(std::int64_t id)
    {
        std::lock_guard lock(m_);
        auto it = opts_.shared_directory.empty() ? entries_.find(id) : refresh(id);
        if (it == entries_.end()) {
            ++stats_.misses;
            return std::nullopt;
        }
        ++stats_.hits;
        const entry& e = it->second;
        hit h{e.level, traits::make(e.head)};
        std::span<std::byte> out = traits::bytes(h.value);
        if (out.size() != e.size)
            throw error("activation_cache: the payload rebuilt from its header has " + std::to_string(out.size()) +
                        " bytes, but " + std::to_string(e.size) + " were stored");
        if (e.on_disk && opts_.shared_directory.empty()) read_spill(e.offset, out);
        else if (e.on_disk) read_file(id, out, file_offset());
        else if (e.size) std::memcpy(out.data(), e.bytes.data(), e.size);
        return h;
    }

    //! Stores `value` as sample `id`'s output at freeze `level` (>= 0), replacing a lower level.
    void put(std::int64_t id, int level, const T& value)
    {
        if (level < 0) throw invalid_argument("activation_cache::put: level " + std::to_string(level) + " is negative");
        const std::span<const std::byte> in = traits::bytes(value);
        std::lock_guard lock(m_);
        if (!opts_.shared_directory.empty()) refresh(id);
        auto [it, fresh] = entries_.try_emplace(id);
        entry& e = it->second;
        if (!fresh) {
            if (level < e.level)
                throw invalid_argument("activation_cache::put: sample " + std::to_string(id) + " is cached at level " +
                                       std::to_string(e.level) + "; level " + std::to_string(level) +
                                       " would go back (freezing only grows)");
            drop(id, e);
        }
        e.level = level;
        e.head = traits::header_of(value);
        e.size = in.size();
        if (opts_.shared_directory.empty() && stats_.host_bytes + in.size() <= opts_.host_bytes) {
            e.bytes.assign(in.begin(), in.end());
            e.on_disk = false;
            stats_.host_bytes += in.size();
            ++stats_.host_entries;
        } else {
            if (opts_.shared_directory.empty()) write_spill(e, in);
            else write_file(id, level, e.head, in);
            e.on_disk = true;
            stats_.disk_bytes += in.size();
            ++stats_.disk_entries;
        }
    }

    cache_stats stats() const
    {
        std::lock_guard lock(m_);
        return stats_;
    }
    //! Where the spill file was created (unlinked at once; empty until the first spill).
    std::filesystem::path spill_directory() const
    {
        std::lock_guard lock(m_);
        return spill_parent_;
    }

private:
    struct entry {
        int level = 0;
        header head{};
        std::size_t size = 0;
        bool on_disk = false;
        std::uint64_t offset = 0;      //!< private spill: where its bytes are in the file
        std::size_t capacity = 0;      //!< private spill: bytes reserved there
        std::vector<std::byte> bytes;  //!< host copy (empty on disk)
    };

    void drop(std::int64_t id, entry& e)
    {
        if (e.on_disk) {
            std::error_code ec;
            if (!opts_.shared_directory.empty()) std::filesystem::remove(file_of(id), ec);
            stats_.disk_bytes -= e.size;
            --stats_.disk_entries;
        } else {
            stats_.host_bytes -= e.size;
            --stats_.host_entries;
            std::vector<std::byte>().swap(e.bytes);
        }
    }

    std::filesystem::path file_of(std::int64_t id) const { return dir_ / (std::to_string(id) + ".bin"); }
    static constexpr std::size_t file_offset() { return sizeof(std::int32_t) + sizeof(header); }

    //! Shared directory: the entry as its file says now (another process may have written it),
    //! or end() when there is none.
    typename std::map<std::int64_t, entry>::iterator refresh(std::int64_t id)
    {
        if (auto old = entries_.find(id); old != entries_.end()) {
            stats_.disk_bytes -= old->second.size;
            --stats_.disk_entries;
            entries_.erase(old);
        }
        std::ifstream f(file_of(id), std::ios::binary);
        if (!f) return entries_.end();
        std::int32_t level = 0;
        header head{};
        f.read(reinterpret_cast<char*>(&level), sizeof level);
        f.read(reinterpret_cast<char*>(&head), sizeof head);
        f.seekg(0, std::ios::end);
        const auto end = static_cast<std::size_t>(f.tellg());
        if (!f || end < file_offset()) return entries_.end();
        entry e;
        e.level = level;
        e.head = head;
        e.size = end - file_offset();
        e.on_disk = true;
        stats_.disk_bytes += e.size;
        ++stats_.disk_entries;
        return entries_.emplace(id, std::move(e)).first;
    }

    //! The private spill file: created, then unlinked at once (it lives as long as fd_).
    void open_spill()
    {
        std::error_code ec;
        const std::filesystem::path parent =
            opts_.spill_parent.empty() ? std::filesystem::temp_directory_path(ec) : opts_.spill_parent;
        std::string templ = (parent / "tpipe-cache-XXXXXX").string();
        const int fd = ::mkstemp(templ.data());
        if (fd < 0)
            throw error("activation_cache: cannot create a spill file in '" + parent.string() + "' (" +
                        std::strerror(errno) + "; the host budget of " + std::to_string(opts_.host_bytes) +
                        " bytes is exceeded): point TMPDIR (or cache_options::spill_parent) at a writable directory, "
                        "or raise the host budget");
        ::unlink(templ.c_str());
        fd_ = fd;
        spill_parent_ = parent;
    }

    //! The entry's bytes into the spill file: in its old place if they fit, else at the end.
    void write_spill(entry& e, std::span<const std::byte> in)
    {
        if (fd_ < 0) open_spill();
        if (in.size() > e.capacity) {
            e.offset = spill_end_;
            e.capacity = in.size();
            spill_end_ += in.size();
        }
        std::size_t done = 0;
        while (done < in.size()) {
            const ssize_t n = ::pwrite(fd_, in.data() + done, in.size() - done, static_cast<off_t>(e.offset + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0)
                throw error(std::string("activation_cache: cannot write the spill file in '") + spill_parent_.string() +
                            "' (" + std::strerror(n < 0 ? errno : ENOSPC) + ")");
            done += static_cast<std::size_t>(n);
        }
    }

    void read_spill(std::uint64_t offset, std::span<std::byte> out) const
    {
        std::size_t done = 0;
        while (done < out.size()) {
            const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) throw error("activation_cache: a spilled entry is short in the spill file");
            done += static_cast<std::size_t>(n);
        }
    }

    //! The entry's file: level, header, bytes; written under a temporary name, then renamed.
    void write_file(std::int64_t id, int level, const header& head, std::span<const std::byte> in)
    {
        const std::filesystem::path tmp = file_of(id).string() + ".tmp" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
        {
            std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
            const auto l = static_cast<std::int32_t>(level);
            f.write(reinterpret_cast<const char*>(&l), sizeof l);
            f.write(reinterpret_cast<const char*>(&head), sizeof head);
            f.write(reinterpret_cast<const char*>(in.data()), static_cast<std::streamsize>(in.size()));
            if (!f) throw error("activation_cache: cannot write '" + tmp.string() + "' (disk full?)");
        }
        std::error_code ec;
        std::filesystem::rename(tmp, file_of(id), ec);
        if (ec) throw error("activation_cache: cannot rename '" + tmp.string() + "': " + ec.message());
    }

    void read_file(std::int64_t id, std::span<std::byte> out, std::size_t offset) const
    {
        std::ifstream f(file_of(id), std::ios::binary);
        f.seekg(static_cast<std::streamoff>(offset));
        f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
        if (!f || f.gcount() != static_cast<std::streamsize>(out.size()))
            throw error("activation_cache: spilled entry '" + file_of(id).string() + "' is missing or short");
    }

    cache_options opts_;
    mutable std::mutex m_;
    std::map<std::int64_t, entry> entries_;
    cache_stats stats_;
    std::filesystem::path dir_;           //!< the shared directory
    std::filesystem::path spill_parent_;  //!< where the private spill file was created
    int fd_ = -1;                         //!< the private spill file (unlinked)
    std::uint64_t spill_end_ = 0;
};

} // namespace tpipe::elastic
