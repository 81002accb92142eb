#pragma once
// What the example trainers check about how they were launched:
// - refuse_independent_copies: started by mpirun/srun as one of several processes without
//   --transport mpi, every process would train its own model and exit 0;
// - content_digest / executable_digest: fields of the launch fingerprint (tpipe/exec/fingerprint.hpp)
//   that every process of an MPI job agrees on before the first step, so that a stale binary on
//   one node or a different data file is named instead of training a wrong model;
// - stop_request: SIGINT/SIGTERM stop training at a step boundary.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include <tpipe/exec/launch.hpp>

#include <signal.h>

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
    bool requested() const noexcept { return detail::stop_signal != 0; }
    int signal() const noexcept { return static_cast<int>(detail::stop_signal); }
    //! What a stopped run says: `agreed` is the signal every process stopped for (over MPI the
    //! largest any of them received, so this one may not have received it itself).
    std::string stopped_at(int agreed, std::int64_t after, std::int64_t of) const
    {
        return std::string(signal_name(agreed)) + (requested() ? " received" : " received by another process") +
               ": stopped at the step boundary after step " + std::to_string(after) + " of " + std::to_string(of);
    }

private:
    static const char* signal_name(int sig) noexcept { return sig == SIGINT ? "SIGINT" : "SIGTERM"; }

    bool enabled_;
    struct sigaction old_int_ {}, old_term_ {};
};

} // namespace tpipe_examples
