#pragma once
// Reading a whole input file (a program CSV, a latency or elastic model, training text) with the
// reasons a user needs when it cannot be read: missing, a directory, not a regular file (a FIFO
// would block in open() forever, /dev/zero would be read until memory runs out), unreadable, or
// larger than the limit. The read itself is bounded too: a file that grows while it is read, or
// reports no size (/proc), stops at the limit instead of filling memory. write_file and
// close_standard_output check every write and close, so that no output is lost silently.
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <cstring>
#include <string>
#include <string_view>
#include <system_error>

#include "tpipe/core/error.hpp"
#include "tpipe/core/quote.hpp"

namespace tpipe {

//! Largest input file read whole (programs and models are kilobytes; this refuses a mistake such
//! as a data set passed for a model before it is read into memory).
inline constexpr std::uintmax_t max_input_file_bytes = std::uintmax_t{256} << 20;

namespace detail {
inline const char* file_kind(std::filesystem::file_type t)
{
    switch (t) {
    case std::filesystem::file_type::fifo: return "a FIFO (named pipe)";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::block: return "a block device";
    case std::filesystem::file_type::socket: return "a socket";
    default: return "not a regular file";
    }
}
} // namespace detail

//! The bytes of the regular file at `path`, at most `max_bytes`; `what` names it in errors
//! ("latency model file", ...).
inline std::string read_file(const std::string& path, const std::string& what,
                             std::uintmax_t max_bytes = max_input_file_bytes)
{
    namespace fs = std::filesystem;
    const std::string name = what + " " + quote(path);
    if (path.empty()) throw invalid_argument(what + ": the path is empty");
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
        throw invalid_argument(name + " cannot be read: " + ec.message());  // e.g. in a directory of mode 000
    if (ec || !fs::exists(status)) throw invalid_argument(name + " does not exist");
    if (fs::is_directory(status)) throw invalid_argument(name + " is a directory, not a file");
    if (!fs::is_regular_file(status))
        throw invalid_argument(name + " is " + detail::file_kind(status.type()) +
                               "; inputs are read whole, so give a regular file (save the stream to a file first)");
    const auto size = fs::file_size(path, ec);
    const auto limit_text = [&] {
        return max_bytes >= (std::uintmax_t{1} << 20) ? std::to_string(max_bytes >> 20) + " MiB"
                                                       : std::to_string(max_bytes) + " bytes";
    };
    if (!ec && size > max_bytes)
        throw invalid_argument(name + " has " + std::to_string(size) + " bytes; inputs are read whole, up to " +
                               limit_text());
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw invalid_argument("cannot open " + name);
    std::string text;
    char buf[1 << 16];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) {
        if (text.size() + n > max_bytes) {
            std::fclose(f);
            throw invalid_argument(name + " holds more than " + limit_text() + "; inputs are read whole, up to that");
        }
        text.append(buf, n);
    }
    const bool failed = std::ferror(f) != 0;
    std::fclose(f);
    if (failed) throw invalid_argument("failed while reading " + name);
    return text;
}

//! Writes `text` to `path` (created or truncated), checking every write and the close: a full disk
//! or /dev/full is an error naming the path, never output silently lost. `what` names it in errors.
inline void write_file(const std::string& path, std::string_view text, const std::string& what = "output file")
{
    if (path.empty()) throw invalid_argument(what + ": the path is empty; give a file name");
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) throw error("cannot write " + what + " " + quote(path) + ": " + std::strerror(errno));
    bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    int why = ok ? 0 : errno;
    if (std::fflush(f) != 0 && ok) ok = false, why = errno;
    if (std::fclose(f) != 0 && ok) ok = false, why = errno;
    if (!ok) throw error("failed while writing " + what + " " + quote(path) + ": " + std::strerror(why));
}

//! Flushes and closes standard output (std::cout shares its buffer): call once at the end of a
//! command. Throws naming it if what was written could not be delivered (a full disk, /dev/full,
//! a closed pipe).
inline void close_standard_output()
{
    std::fflush(stdout);
    const bool failed = std::ferror(stdout) != 0;
    const int why = errno;
    if (std::fclose(stdout) != 0 || failed)
        throw error(std::string("failed while writing the standard output: ") + std::strerror(failed ? why : errno));
}

} // namespace tpipe
