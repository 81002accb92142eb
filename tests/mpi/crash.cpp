// A process that dies mid-iteration, for tests/mpi/crash_check.sh: every process runs a 1F1B
// pipeline over MPI (one rank each); the last one fails at the forward of microbatch 1 by
// throwing, calling exit(3), or SIGKILL (argv[1]: throw | exit | kill; uncaught: throws, and
// the error leaves main); or (stop_at_end) the run succeeds, with a 2 s watchdog on a
// communicator, and the last process stops itself (SIGSTOP) after it, before MPI_Finalize; or
// (stop_before_STEP) the environment bounds set-up by 2 s and the last process stops itself
// before one set-up step: launch (a launch agreement, tpipe::mpi::agree), world (a communicator
// of every process), nccl_id (NCCL's unique id over MPI, exchange_through_mpi), split (its
// split), transport (the transport's layout agreement) or runner
// (the runner's agree); or (stop_inside_split) the last process begins the split (its first
// exchange made: a barrier over the communicator, as a member stopped inside MPI_Comm_split has
// made its first exchanges) and stops; or (stop_while_busy) under a 2 s watchdog the last
// process works for 3 s in a busy section (communicator::busy: "profiling the plan", as
// train_gpt's process 0 does while the others wait to receive the plan), then stops itself in
// it. Each process prints what it saw; the check asserts that the job ends within the watchdog
// time, naming the rank.
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include <unistd.h>

#include "../exec/pipes.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/one_f_one_b.hpp"
#include "tpipe/slice/slicers.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/mpi/agree.hpp"
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/mpi/environment.hpp"
#include "tpipe/mpi/transport.hpp"
#include "tpipe/nccl/mpi_bootstrap.hpp"

namespace {
//! A synthetic stage that dies its own way at the forward of microbatch 1.
struct dying : synth::stage<false> {
    std::string how;
    dying(int i, std::string h) : synth::stage<false>(1, i), how(std::move(h)) {}
    synth::vec forward(const tpipe::unit& u, synth::vec x)
    {
        if (!how.empty() && u.microbatch == 1) {
            if (how == "exit") std::exit(3);
            if (how == "kill") std::raise(SIGKILL);
            throw std::runtime_error("injected fault (throw)");
        }
        return synth::stage<false>::forward(u, std::move(x));
    }
};
} // namespace

int main(int argc, char** argv)
{
    const std::string how = argc > 1 ? argv[1] : "throw";
    const bool in_setup = how.starts_with("stop_before_") || how == "stop_inside_split";
    tpipe::mpi::environment_options eo;
    if (in_setup) eo.watchdog = std::chrono::seconds(2);
    tpipe::mpi::environment env(argc, argv, eo);
    int me = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    // The last process stops itself before set-up step `step` (stop_before_<step>).
    auto stop_before = [&](const char* step) {
        if (how != std::string("stop_before_") + step || me != n - 1) return;
        std::cout << "process " << me << ": stopping before " << step << ", pid " << getpid() << "\n" << std::flush;
        std::raise(SIGSTOP);
    };
    try {
        stop_before("launch");
        tpipe::mpi::agree(MPI_COMM_WORLD, "crash test " + how, "");
        stop_before("world");
        auto world = tpipe::mpi::communicator::world();
        if (how == "stop_while_busy") {
            world.set_watchdog(std::chrono::seconds(2));
            std::int64_t plan = 0;
            if (me == n - 1) {
                auto busy = world.busy("profiling the plan");
                std::this_thread::sleep_for(std::chrono::seconds(3));  // past the bound: the others wait on
                std::cout << "process " << me << ": stopping while busy, pid " << getpid() << "\n" << std::flush;
                std::raise(SIGSTOP);
            }
            tpipe::sync_wait([](tpipe::mpi::communicator& c, std::int64_t& v, int root) -> tpipe::task<void> {
                co_await c.broadcast(std::as_writable_bytes(std::span<std::int64_t>(&v, 1)), root);
            }(world, plan, n - 1));
            return 0;
        }
        // NCCL's bootstrap over MPI (bytes only, no NCCL needed), rooted at the process that
        // stops: the others wait for its id (a root does not wait for the receivers).
        stop_before("nccl_id");
        (void)tpipe::nccl::exchange_through_mpi(MPI_COMM_WORLD, [] { return tpipe::nccl::unique_id{}; }, n - 1);
        stop_before("split");
        if (how == "stop_inside_split" && me == n - 1) {
            MPI_Request begun = MPI_REQUEST_NULL;
            MPI_Ibarrier(world.native(), &begun);
            std::cout << "process " << me << ": stopping inside split, pid " << getpid() << "\n" << std::flush;
            std::raise(SIGSTOP);
        }
        auto halves = world.split(me % 2, me);
        stop_before("transport");
        tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n), 0);
        std::vector<dying> stages;
        const bool stop_at_end = how == "stop_at_end";
        if (stop_at_end) world.set_watchdog(std::chrono::seconds(2));  // bounds MPI_Finalize too
        for (int i = 0; i < n; ++i) stages.emplace_back(i, i == n - 1 && !stop_at_end && !in_setup ? how : std::string());
        tpipe::uniform_pipeline<dying> pipe(std::move(stages));
        tpipe::cpu_engine eng(1);
        tpipe::run_options opts;
        opts.watchdog = std::chrono::seconds(5);
        stop_before("runner");
        tpipe::runner r(pipe, tpipe::one_f_one_b{}.program(tpipe::topology{n}, tpipe::microbatches(2 * n)), eng, x, opts);
        tpipe::io_for<decltype(pipe)> io;
        io.source = synth::source;
        try {
            r.run(io);
            std::cout << "process " << me << ": finished\n" << std::flush;
            if (stop_at_end && me == n - 1) {
                std::cout << "process " << me << ": stopping, pid " << getpid() << "\n" << std::flush;
                std::raise(SIGSTOP);
            }  // after its last collective: the others wait in MPI_Finalize
            return 0;
        } catch (const std::exception& e) {
            if (how == "uncaught") throw;  // out of main: the environment ends the process with the message
            std::cout << "process " << me << ": " << e.what() << "\n" << std::flush;
            return 1;
        }
    } catch (const tpipe::watchdog_error& e) {  // in set-up: a process did not arrive
        std::cout << "process " << me << ": " << e.what() << "\n" << std::flush;
        tpipe::mpi::end_job_on_error(1);
        return 1;
    }
}
