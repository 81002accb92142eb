#pragma once
// What the example trainers check about how they were launched:
// - refuse_independent_copies: started by mpirun/srun as one of several processes without
//   --transport mpi, every process would train its own model and exit 0;
// - content_digest / executable_digest: fields of the launch fingerprint (tpipe/exec/fingerprint.hpp)
//   that every process of an MPI job agrees on before the first step, so that a stale binary on
//   one node or a different data file is named instead of training a wrong model;
// - checkpoint_identity: what a --resume read, for the processes of an MPI job to agree on;
// - stop_request: SIGINT/SIGTERM, or a standard output whose reader went away, stop training at
//   a step boundary.
// - prepare_process: signals a trainer handles itself, and a stack limit its threads cannot run on.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include <tpipe/core/file.hpp>
#include <tpipe/exec/launch.hpp>
#include <tpipe/state/checkpoint_directory.hpp>
#include <tpipe/state/manifest.hpp>

#include <signal.h>
#include <sys/resource.h>

#include <tpipe/core/error.hpp>

#include "flags.hpp"

namespace tpipe_examples {

//! FNV-1a of `bytes` as 16 hex digits.
inline std::string content_digest(std::string_view bytes)
{
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

//! The checkpoint a --resume `path` reads (the newest committed one of a run directory, or
//! `path`): its manifest's digest (the manifest holds the step, data streams and every shard's
//! checksum) and its directory. Processes of one job that resumed from different checkpoints
//! (other working directories, a save that landed between their starts) differ here.
inline std::string checkpoint_identity(const std::string& path)
{
    const std::string dir = tpipe::state::checkpoint_directory::resolve(path);
    const std::string manifest = tpipe::read_file(dir + "/" + tpipe::state::manifest_file, "checkpoint manifest");
    return content_digest(manifest) + " (" + dir + ")";
}

//! The digest of this program's own executable (the binary and the tpipe headers compiled into it).
inline std::string executable_digest()
{
    std::ifstream in("/proc/self/exe", std::ios::binary);
    if (!in) return "unknown";
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return content_digest(bytes) + " (" + std::to_string(bytes.size()) + " bytes)";
}

//! Refuses to run as one of several processes of an MPI (or srun) launch unless `transport` is mpi.
inline void refuse_independent_copies(const std::string& program, const std::string& transport)
{
    if (transport == "mpi") return;
    const tpipe::launch l = tpipe::launch::detect();
    if (l.processes > 1)
        throw usage_error("this " + program + " is one of " + std::to_string(l.processes) +
                          " processes started by a launcher (" + l.variable + "), but --transport is " + transport +
                          ": every process would train its own model independently; add --transport mpi, or start "
                          "one process");
}

//! First thing in a trainer's main:
//! - SIGXFSZ ignored: a write past the file size limit (ulimit -f) fails with EFBIG, and the save
//!   says so (the committed checkpoints stay whole), instead of the signal killing the process;
//! - SIGPIPE ignored: a write to a standard output whose reader went away (`| head`) fails with
//!   EPIPE instead of killing the process mid-save; stop_request sees it at the next step boundary;
//! - a stack size limit (ulimit -s) under `min_stack_kib` refused with a sentence: glibc gives
//!   every new thread a stack of that size, and a stage thread would overflow it (SIGSEGV, no
//!   message). Throws tpipe::error.
inline void prepare_process(const std::string& program, unsigned long min_stack_kib = 1024)
{
    std::signal(SIGXFSZ, SIG_IGN);
    std::signal(SIGPIPE, SIG_IGN);
    struct rlimit st {};
    if (::getrlimit(RLIMIT_STACK, &st) == 0 && st.rlim_cur != RLIM_INFINITY && st.rlim_cur < (min_stack_kib << 10))
        throw tpipe::error("the stack size limit (ulimit -s) is " + std::to_string(st.rlim_cur >> 10) + " KiB; " + program +
                           " needs at least " + std::to_string(min_stack_kib) +
                           " KiB (its threads take their stack size from it): raise it, e.g. ulimit -s 8192");
}

//! Whether the standard output can no longer be written (EPIPE: its reader went away; or a full
//! disk): what was printed is lost, and so would be what follows.
inline bool standard_output_lost() noexcept { return std::ferror(stdout) != 0; }

namespace detail {
inline volatile std::sig_atomic_t stop_signal = 0;
extern "C" inline void note_stop_signal(int sig) { stop_signal = sig; }
} // namespace detail

//! While alive (and `enabled`), SIGINT and SIGTERM do not end the process: the training loop asks
//! requested() at each step boundary and stops there, so that destructors run (spill files,
//! output) and the step count is said. A second signal while the first waits ends the process.
class stop_request {
public:
    explicit stop_request(bool enabled) : enabled_(enabled)
    {
        if (!enabled_) return;
        detail::stop_signal = 0;
        struct sigaction sa {};
        sa.sa_handler = &detail::note_stop_signal;
        sa.sa_flags = SA_RESETHAND;  // the second signal takes the default action
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int_);
        sigaction(SIGTERM, &sa, &old_term_);
    }
    stop_request(const stop_request&) = delete;
    stop_request& operator=(const stop_request&) = delete;
    ~stop_request()
    {
        if (!enabled_) return;
        sigaction(SIGINT, &old_int_, nullptr);
        sigaction(SIGTERM, &old_term_, nullptr);
    }
    bool requested() const noexcept { return signal() != 0; }
    //! The signal to stop for: SIGINT or SIGTERM received, or SIGPIPE standing for a standard
    //! output that can no longer be written (SIGPIPE itself is ignored: prepare_process); 0: none.
    int signal() const noexcept
    {
        if (detail::stop_signal != 0) return static_cast<int>(detail::stop_signal);
        return enabled_ && standard_output_lost() ? SIGPIPE : 0;
    }
    //! What a stopped run says: `agreed` is the signal every process stopped for (over MPI the
    //! largest any of them received, so this one may not have received it itself).
    std::string stopped_at(int agreed, std::int64_t after, std::int64_t of) const
    {
        const std::string why = agreed == SIGPIPE
                                    ? std::string("the standard output was closed (EPIPE)") + (requested() ? "" : " on another process")
                                    : std::string(signal_name(agreed)) + (requested() ? " received" : " received by another process");
        return why + ": stopped at the step boundary after step " + std::to_string(after) + " of " + std::to_string(of);
    }

private:
    static const char* signal_name(int sig) noexcept { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

    bool enabled_;
    struct sigaction old_int_ {}, old_term_ {};
};

} // namespace tpipe_examples
