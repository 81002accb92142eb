#pragma once
// Reading a shard back: first the whole file is checked against the manifest (present, of the
// recorded size, with the recorded checksum), then ranges are read by byte offset.
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpipe/state/checksum.hpp"
#include "tpipe/state/durable_file.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/manifest.hpp"

namespace tpipe::state {

class shard_reader {
public:
    //! Opens and checks shard `e` of the checkpoint in `dir`: throws corrupt_checkpoint naming the
    //! file if it is missing, of another size (truncated) or fails its checksum.
    shard_reader(const std::string& dir, const shard_entry& e) : path_(dir + "/" + e.file), entry_(e)
    {
        // O_NONBLOCK: a FIFO (or a link to one) must be refused below, not block open() forever.
        fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd_ < 0)
            throw corrupt_checkpoint("checkpoint shard \"" + path_ + "\" is missing or unreadable (" +
                                     detail::errno_text() + "); the manifest lists it with " +
                                     std::to_string(e.bytes) + " bytes");
        struct stat st {};
        if (::fstat(fd_, &st) == 0 && !S_ISREG(st.st_mode)) {
            ::close(fd_);
            throw corrupt_checkpoint("checkpoint shard \"" + path_ + "\" is " + kind(st.st_mode) +
                                     ", not a regular file; a checkpoint's shards are files of the sizes its "
                                     "manifest records");
        }
        if (::fstat(fd_, &st) != 0 || st.st_size != e.bytes) {
            const auto size = static_cast<long long>(st.st_size);
            ::close(fd_);
            throw corrupt_checkpoint("checkpoint shard \"" + path_ + "\" has " + std::to_string(size) +
                                     " bytes; the manifest records " + std::to_string(e.bytes) +
                                     (size < e.bytes ? " (truncated)" : ""));
        }
        checksum sum(e.kind);
        std::vector<std::byte> buf(std::size_t{1} << 20);
        for (std::int64_t at = 0; at < e.bytes;) {
            const std::size_t want = static_cast<std::size_t>(std::min<std::int64_t>(e.bytes - at, std::int64_t(buf.size())));
            read_at(at, std::span<std::byte>(buf.data(), want));
            sum.update(std::span<const std::byte>(buf.data(), want));
            at += static_cast<std::int64_t>(want);
        }
        if (sum.value() != e.checksum) {
            ::close(fd_);
            throw corrupt_checkpoint("checkpoint shard \"" + path_ + "\" fails its checksum (" + checksum::name(e.kind) + " " +
                                     sum.hex() + ", the manifest records " +
                                     checksum::to_hex(e.checksum, checksum::digits(e.kind)) + "): it is damaged");
        }
    }
    ~shard_reader()
    {
        if (fd_ >= 0) ::close(fd_);
    }
    shard_reader(const shard_reader&) = delete;
    shard_reader& operator=(const shard_reader&) = delete;

    const shard_entry& entry() const { return entry_; }
    const std::string& path() const { return path_; }

    //! Reads out.size() bytes at byte `offset` of the shard; refuses bytes outside it.
    void read_at(std::int64_t offset, std::span<std::byte> out) const
    {
        if (offset < 0 || offset > entry_.bytes || std::cmp_greater(out.size(), entry_.bytes - offset))
            throw corrupt_checkpoint("checkpoint shard \"" + path_ + "\": a read of " + std::to_string(out.size()) +
                                     " bytes at byte " + std::to_string(offset) + " lies outside its " +
                                     std::to_string(entry_.bytes) + " bytes");
        std::size_t done = 0;
        while (done < out.size()) {
            const ::ssize_t n = ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(offset) + static_cast<off_t>(done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0)
                throw corrupt_checkpoint("reading checkpoint shard \"" + path_ + "\" failed at byte " +
                                         std::to_string(offset + static_cast<std::int64_t>(done)) +
                                         (n == 0 ? " (it ended early)" : ": " + detail::errno_text()));
            done += static_cast<std::size_t>(n);
        }
    }

private:
    static const char* kind(mode_t m)
    {
        if (S_ISDIR(m)) return "a directory";
        if (S_ISFIFO(m)) return "a FIFO (named pipe)";
        if (S_ISCHR(m)) return "a character device";
        if (S_ISBLK(m)) return "a block device";
        if (S_ISSOCK(m)) return "a socket";
        return "not a regular file";
    }

    std::string path_;
    shard_entry entry_;
    int fd_ = -1;
};

} // namespace tpipe::state
