#pragma once
// What the example trainers (train_gpt, train_libtorch_gpt) check beyond tpipe::flag_reader's
// rules: a bad value is a usage_error (exit status 2) saying what the flag needs.
#include <iostream>
#include <string>

#include "cli/flag_reader.hpp"
#include <tpipe/core/quote.hpp>
#include <tpipe/elastic/fraction.hpp>

#include <unistd.h>

namespace tpipe_examples {

using usage_error = tpipe::usage_error;  // what tpipe::flag_reader throws: exit status 2

//! A fraction given as p/q or a decimal (--alpha 1/3, as the help shows its default), exactly.
inline double to_fraction(const std::string& flag, const std::string& v)
{
    try {
        const double x = tpipe::elastic::fraction::parse(v).value();
        if (x > 0) return x;
    } catch (const tpipe::error&) {
    }
    throw usage_error(flag + " needs p/q or a decimal such as 1/3 or 0.25, above 0, got " + tpipe::quote(v));
}

//! --threads N: more software threads than this machine's cores only slow every one of them down
//! (a warning on stderr); more than a process can start is refused. `per_thread_processes` is how
//! many processes share the machine's cores.
inline void check_threads(int threads, int processes_here)
{
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    constexpr int most = 4096;  // beyond this, thread creation itself (stacks, RLIMIT_NPROC) is the risk
    if (threads > most)
        throw usage_error("--threads " + std::to_string(threads) + " is more threads than a process starts here (at most " +
                          std::to_string(most) + "); this machine has " + std::to_string(cores) + " cores");
    if (cores > 0 && static_cast<long>(threads) * processes_here > cores)
        std::cerr << "warning: --threads " << threads << (processes_here > 1 ? " x " + std::to_string(processes_here) + " processes" : "")
                  << " is more than this machine's " << cores << " cores; the threads will share them and run slower\n";
}

//! --link L: mpi or ucx; ucx only in an app built with UCX (`with_ucx`: its TPIPE_APPS_UCX).
inline void check_link(const std::string& app, const std::string& link, bool with_ucx)
{
    if (link != "mpi" && link != "ucx") throw usage_error("unknown link " + tpipe::quote(link) + "; use mpi or ucx");
    if (link == "ucx" && !with_ucx)
        throw usage_error("--link ucx: this " + app + " was built without UCX (configure with -DTPIPE_ENABLE_UCX=ON)");
}

} // namespace tpipe_examples
