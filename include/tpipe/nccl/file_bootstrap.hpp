#pragma once
// tpipe::nccl::exchange_through_file: hands rank 0's ncclUniqueId to every member of a job
// through a file on a file system they share (no MPI needed). Rank 0 makes the id and writes
// it atomically (a temporary name in the same directory, then rename), so a reader sees the
// whole id or nothing; every other rank polls for the file and reads it, and after `timeout`
// throws a tpipe::error naming the file, the rank and how long it waited.
//
//   auto id = tpipe::nccl::exchange_through_file("/shared/job-42.ncclid", rank,
//                                                tpipe::nccl::runtime_api::make_unique_id);
//
// The path must be fresh for each job (put the job's id in it): rank 0 refuses a file that
// already exists, since the other ranks could have read a stale id from it. Remove the file
// once every rank has initialised its communicator (remove_bootstrap_file).
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <thread>

#include <unistd.h>

#include "tpipe/core/error.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/nccl/api.hpp"

namespace tpipe::nccl {

struct file_bootstrap_options {
    std::chrono::milliseconds timeout{std::chrono::minutes(2)};  //!< how long rank > 0 waits for the file
    std::chrono::milliseconds poll{std::chrono::milliseconds(5)};
};

namespace detail {
inline constexpr char id_file_magic[] = "tpipe-nccl-unique-id v1\n";
inline constexpr std::size_t id_file_magic_bytes = sizeof(id_file_magic) - 1;
} // namespace detail

//! Rank 0: writes make() to `path` and returns it; other ranks: wait for the file, return its id.
template <class Make>
unique_id exchange_through_file(const std::filesystem::path& path, int rank, Make&& make, file_bootstrap_options o = {})
{
    namespace fs = std::filesystem;
    if (rank < 0) throw invalid_argument("tpipe::nccl::exchange_through_file: rank " + std::to_string(rank) + " is negative");
    std::error_code ec;
    if (rank == 0) {
        if (fs::exists(path, ec))
            throw invalid_argument("tpipe::nccl::exchange_through_file: rank 0 finds \"" + path.string() +
                                   "\" already there; it may hold an earlier job's id that other ranks have read: remove "
                                   "it, or use a path that is new for this job");
        const unique_id id = make();
        const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
        {
            std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
            out.write(detail::id_file_magic, static_cast<std::streamsize>(detail::id_file_magic_bytes));
            out.write(reinterpret_cast<const char*>(id.bytes.data()), static_cast<std::streamsize>(id.bytes.size()));
            out.close();
            if (!out) throw error("tpipe::nccl::exchange_through_file: rank 0 cannot write \"" + tmp.string() + "\"");
        }
        fs::rename(tmp, path, ec);
        if (ec) {
            fs::remove(tmp, ec);
            throw error("tpipe::nccl::exchange_through_file: rank 0 cannot rename \"" + tmp.string() + "\" to \"" + path.string() +
                        "\": " + ec.message());
        }
        return id;
    }
    const auto start = std::chrono::steady_clock::now();
    while (!fs::exists(path, ec)) {
        const auto waited = std::chrono::steady_clock::now() - start;
        if (waited >= o.timeout)
            throw error("tpipe::nccl::exchange_through_file: rank " + std::to_string(rank) + " waited " +
                        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) + " ms for \"" +
                        path.string() + "\", which rank 0 writes; it never appeared (is rank 0 running, and is the path on a "
                        "file system every rank shares?)");
        std::this_thread::sleep_for(o.poll);
    }
    const std::string text = read_file(path.string(), "NCCL bootstrap file");
    unique_id id;
    if (text.size() != detail::id_file_magic_bytes + id.bytes.size() ||
        text.compare(0, detail::id_file_magic_bytes, detail::id_file_magic) != 0)
        throw error("tpipe::nccl::exchange_through_file: \"" + path.string() + "\" (read by rank " + std::to_string(rank) +
                    ") is not a tpipe NCCL id file (" + std::to_string(text.size()) + " bytes)");
    std::memcpy(id.bytes.data(), text.data() + detail::id_file_magic_bytes, id.bytes.size());
    return id;
}

//! Removes the bootstrap file (rank 0, once every rank has its communicator).
inline void remove_bootstrap_file(const std::filesystem::path& path) noexcept
{
    std::error_code ec;
    std::filesystem::remove(path, ec);
}

} // namespace tpipe::nccl
