#pragma once
// Writes that survive a crash: a file's bytes reach the disk (fsync) before it is named as
// part of a checkpoint, and a rename is made durable by syncing the directory that holds it.
// A write past the file size limit fails with EFBIG only where SIGXFSZ is ignored (else the
// signal ends the process): a program that saves ignores it (train_gpt does, in main).
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "tpipe/state/errors.hpp"

namespace tpipe::state {

namespace detail {
inline std::string errno_text() { return std::strerror(errno); }
//! errno's text, and for a write that ran out of room, which limit and what is still safe.
inline std::string write_errno_text()
{
    const int e = errno;
    std::string t = std::strerror(e);
    if (e == EFBIG) t += " (the file size limit, ulimit -f, is below the shard's size)";
    if (e == EFBIG || e == ENOSPC || e == EDQUOT) t += "; the checkpoints committed before are whole";
    return t;
}
} // namespace detail

//! Creates (or truncates) `path`, writes the pieces in order and fsyncs it. Throws write_error.
inline void write_durably(const std::string& path, std::span<const std::span<const std::byte>> pieces)
{
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw write_error("cannot create \"" + path + "\": " + detail::errno_text());
    auto fail = [&](const char* what) {
        const std::string why = detail::write_errno_text();
        ::close(fd);
        throw write_error(std::string(what) + " \"" + path + "\" failed: " + why);
    };
    for (auto piece : pieces) {
        const std::byte* p = piece.data();
        std::size_t left = piece.size();
        while (left > 0) {
            const ::ssize_t n = ::write(fd, p, left);
            if (n < 0 && errno == EINTR) continue;
            if (n == 0) errno = ENOSPC;  // no byte written and no error: no room
            if (n <= 0) fail("writing");
            p += n;
            left -= static_cast<std::size_t>(n);
        }
    }
    if (::fsync(fd) != 0) fail("fsync of");
    if (::close(fd) != 0) throw write_error("closing \"" + path + "\" failed: " + detail::errno_text());
}

//! fsyncs the directory `dir`, making the names created or renamed in it durable.
inline void sync_directory(const std::string& dir)
{
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw write_error("cannot open directory \"" + dir + "\" to sync it: " + detail::errno_text());
    const int rc = ::fsync(fd);
    const std::string why = rc != 0 ? detail::errno_text() : std::string();
    ::close(fd);
    if (rc != 0) throw write_error("fsync of directory \"" + dir + "\" failed: " + why);
}

} // namespace tpipe::state
