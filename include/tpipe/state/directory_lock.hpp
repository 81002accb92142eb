#pragma once
// One saving job per checkpoint directory: the saver holds an advisory flock on DIR/.lock for
// as long as it may write there. A second job is refused at once, naming the holder (its pid
// and host, which the holder writes into the file). The kernel drops the lock when the holder's
// process ends, however it ends, so a crashed job never leaves a stale lock behind.
#include <cerrno>
#include <cstring>
#include <string>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tpipe/state/errors.hpp"

namespace tpipe::state {

inline constexpr const char* lock_file = ".lock";

class directory_lock {
public:
    //! Locks the existing directory `dir`; throws directory_conflict if another process holds it,
    //! write_error if the lock file cannot be made.
    explicit directory_lock(const std::string& dir) : path_(dir + "/" + lock_file)
    {
        fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
        if (fd_ < 0)
            throw write_error("cannot create the lock file \"" + path_ + "\" of the checkpoint directory: " +
                              std::strerror(errno));
        struct stat st {};
        if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
            ::close(fd_);
            throw write_error("the lock file \"" + path_ + "\" of the checkpoint directory is not a regular file; "
                              "remove it");
        }
        if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
            const int why = errno;
            std::string holder = why == EWOULDBLOCK ? contents() : std::string();
            ::close(fd_);
            if (why != EWOULDBLOCK)
                throw write_error("cannot lock \"" + path_ + "\": " + std::strerror(why));
            throw directory_conflict("checkpoint directory \"" + dir + "\" is in use by another job (" +
                                     (holder.empty() ? std::string("its lock file is empty") : holder) +
                                     "): two jobs saving into one directory would mix their checkpoints; "
                                     "save into another directory, or wait until that job ends");
        }
        char host[256] = "unknown";
        ::gethostname(host, sizeof host - 1);
        const std::string me = "pid " + std::to_string(::getpid()) + " on host " + host;
        if (::ftruncate(fd_, 0) == 0) {  // informative only: a failed write loses nothing
            [[maybe_unused]] const auto n = ::pwrite(fd_, me.data(), me.size(), 0);
        }
    }
    ~directory_lock() { ::close(fd_); }  // releases the lock (the file stays: removing it would race)
    directory_lock(const directory_lock&) = delete;
    directory_lock& operator=(const directory_lock&) = delete;

private:
    std::string contents() const
    {
        char buf[300];
        const auto n = ::pread(fd_, buf, sizeof buf - 1, 0);
        std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
        for (char& c : s)
            if (static_cast<unsigned char>(c) < 0x20) c = ' ';
        return s;
    }

    std::string path_;
    int fd_ = -1;
};

} // namespace tpipe::state
