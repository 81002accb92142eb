// tpipe::mpi::communicator::set_watchdog (and mpi::job::set_watchdog) under mpiexec -np 2, 3, 4: a member that does not come
// to a collective (here: it sleeps, as a stopped process would, polling nothing) makes every other
// member's collective fail within the bound, naming it as silent and the others as waiting; a
// member that comes late but within the bound does not; split and duplicate inherit the bound;
// with a set-up bound (environment_options::watchdog) a member that does not come to a split is
// named alike; a member busy on purpose (communicator::busy) is waited for while it answers, and
// named with what it did once it stops.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "mpi_suite.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/mpi/environment.hpp"
#include "tpipe/mpi/job.hpp"
#include "tpipe/mpi/setup_watch.hpp"

using tpipe::task;
using tpipe::mpi::communicator;
using namespace std::chrono_literals;

namespace {

std::string name_of(int process) { return "process " + std::to_string(process) + " (test)"; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

//! A barrier that the watchdog gives up: its report, and how long it waited.
std::pair<std::string, std::chrono::steady_clock::duration> barrier_given_up(communicator& c)
{
    const auto t0 = std::chrono::steady_clock::now();
    std::string what;
    try {
        tpipe::sync_wait([](communicator& cc) -> task<void> { co_await cc.barrier(); }(c));
    } catch (const tpipe::watchdog_error& e) {
        what = e.what();
    }
    return {what, std::chrono::steady_clock::now() - t0};
}

} // namespace

TEST_CASE("watchdog: a silent member fails every other member's collective within the bound, naming it", "[mpi][watchdog]")
{
    communicator world = communicator::world();
    communicator c = world.duplicate();
    const auto bound = 1000ms;  // grace 200 ms: the waiting members answer within it even on a loaded machine
    c.set_watchdog(bound, name_of);
    const int silent = c.size() - 1;
    bool ok = false;
    if (c.rank() == silent) {
        // Past everyone's bound; then it completes the barrier the others left to MPI (an MPI_Ibarrier
        // completes without them polling it, unlike the ring's later pieces).
        std::this_thread::sleep_for(bound + 2000ms);
        tpipe::sync_wait([](communicator& cc) -> task<void> { co_await cc.barrier(); }(c));
        ok = true;
    } else {
        const auto [what, took] = barrier_given_up(c);
        INFO(what);
        ok = took >= bound && took < bound + 1000ms && contains(what, "process " + std::to_string(silent) + " (test) is silent") &&
             contains(what, "tpipe::mpi::communicator::barrier #1");
        for (int m = 0; m < c.size() - 1; ++m)  // every other waiting member answered, and said where it waits
            if (m != c.rank()) ok = ok && contains(what, "process " + std::to_string(m) + " (test) waits in tpipe::mpi::communicator::barrier #1");
        CHECK(ok);
        // The next collective is refused: the communicator was left in MPI's hands.
        bool refused = false;
        try {
            tpipe::sync_wait([](communicator& cc) -> task<void> { co_await cc.barrier(); }(c));
        } catch (const tpipe::error& e) {
            refused = contains(e.what(), "unusable");
        }
        ok = ok && refused;
    }
    // The suite goes on (the silent member finished the collective after all): the job need not end.
    tpipe::mpi::detail::member_stalled().store(false);
    REQUIRE(tpipe_test::every_process(ok));
}

TEST_CASE("watchdog: a member late by less than the bound is no stall; split and duplicate inherit the bound", "[mpi][watchdog]")
{
    communicator world = communicator::world();
    world.set_watchdog(800ms);
    communicator pairs = world.split(world.rank() / 2, world.rank());
    communicator again = world.duplicate();
    bool ok = pairs.watchdog() == 800ms && again.watchdog() == 800ms;
    if (world.rank() == 0) std::this_thread::sleep_for(300ms);
    std::vector<std::int64_t> v(64, world.rank());
    try {
        tpipe::sync_wait([](communicator& c, std::span<std::int64_t> s) -> task<void> {
            co_await c.barrier();
            co_await c.all_reduce_sum(s);
        }(world, v));
    } catch (const tpipe::error& e) {
        INFO(e.what());
        ok = false;
    }
    ok = ok && v[0] == static_cast<std::int64_t>(world.size()) * (world.size() - 1) / 2;
    bool refused = false;
    try {
        world.set_watchdog(-1ms);
    } catch (const tpipe::invalid_argument& e) {
        refused = contains(e.what(), "-1 ms is negative");
    }
    world.set_watchdog(0ms);
    ok = ok && refused && world.watchdog() == 0ms;
    REQUIRE(tpipe_test::every_process(ok));
}

TEST_CASE("watchdog: a member busy on purpose for longer than the bound is waited for while it answers", "[mpi][watchdog][busy]")
{
    communicator world = communicator::world();
    communicator c = world.duplicate();
    const auto bound = 1000ms;
    c.set_watchdog(bound, name_of);
    const int root = c.size() - 1;  // "profiles" for three bounds, then sends what it found
    std::int64_t found = -1;
    bool ok = true;
    if (c.rank() == root) {
        auto busy = c.busy("profiling the test plan");
        std::this_thread::sleep_for(3 * bound);
        found = 42;
    }
    try {
        tpipe::sync_wait([](communicator& cc, std::int64_t& v, int r) -> task<void> {
            co_await cc.broadcast(std::as_writable_bytes(std::span<std::int64_t>(&v, 1)), r);
        }(c, found, root));
    } catch (const tpipe::error& e) {
        INFO(e.what());
        ok = false;
    }
    CHECK(found == 42);
    REQUIRE(tpipe_test::every_process(ok && found == 42));
}

TEST_CASE("watchdog: a busy member that stops answering is named with what it was doing", "[mpi][watchdog][busy]")
{
    communicator world = communicator::world();
    communicator c = world.duplicate();
    const auto bound = 1000ms;
    c.set_watchdog(bound, name_of);
    const int root = c.size() - 1;
    bool ok = false;
    if (c.rank() == root) {
        {
            auto busy = c.busy("profiling the test plan");
            std::this_thread::sleep_for(1500ms);
        }
        std::this_thread::sleep_for(bound + 2500ms);  // silent, as a stopped process: the others give up
        tpipe::sync_wait([](communicator& cc) -> task<void> { co_await cc.barrier(); }(c));
        ok = true;
    } else {
        const auto [what, took] = barrier_given_up(c);
        INFO(what);
        // Waited on while it answered (past one bound), given up within a bound of its silence.
        ok = took > bound + 200ms && took < 1500ms + bound + 1000ms &&
             contains(what, "process " + std::to_string(root) + " (test) (last heard profiling the test plan (for ") &&
             contains(what, ") is silent");
        CHECK(ok);
    }
    tpipe::mpi::detail::member_stalled().store(false);
    REQUIRE(tpipe_test::every_process(ok));
}

TEST_CASE("watchdog: mpi::job::set_watchdog arms every group of the job and names processes by coordinate", "[mpi][watchdog]")
{
    const int n = communicator::world().size();
    tpipe::mpi::job job({.pipeline_ranks = n});  // one pipeline of n ranks, a process each
    const auto bound = 1000ms;
    job.set_watchdog(bound);
    bool ok = job.all().watchdog() == bound && job.pipeline().watchdog() == bound && job.tensor().watchdog() == bound &&
              job.data().watchdog() == bound;
    const int silent = n - 1;
    communicator& line = job.pipeline();
    if (job.process() == silent) {
        std::this_thread::sleep_for(bound + 2000ms);
        tpipe::sync_wait([](communicator& cc) -> task<void> { co_await cc.barrier(); }(line));
    } else {
        std::string what;
        try {
            tpipe::sync_wait([](communicator& cc) -> task<void> { co_await cc.barrier(); }(line));
        } catch (const tpipe::watchdog_error& e) {
            what = e.what();
        }
        INFO(what);
        const std::string named = "process " + std::to_string(silent) + " (replica 0, rank " + std::to_string(silent) +
                                  ", tensor rank 0) is silent";
        ok = ok && contains(what, named);
        CHECK(ok);
    }
    tpipe::mpi::detail::member_stalled().store(false);
    REQUIRE(tpipe_test::every_process(ok));
}

TEST_CASE("watchdog: with a set-up bound, a member that does not come to a split is named within it", "[mpi][watchdog][setup]")
{
    communicator world = communicator::world();
    communicator c = world.duplicate();
    const auto bound = 1000ms;
    MPI_Comm notes = MPI_COMM_NULL;  // what environment_options::watchdog does
    MPI_Comm_dup(MPI_COMM_WORLD, &notes);
    tpipe::mpi::detail::bound_setup(notes, bound);
    const int silent = c.size() - 1;
    bool ok = true;
    // Late by less than the bound: no stall.
    if (c.rank() == 0) std::this_thread::sleep_for(300ms);
    try {
        communicator halves = c.split(c.rank() % 2, c.rank());
        ok = halves.size() == (c.size() + 1 - c.rank() % 2) / 2;
    } catch (const tpipe::error& e) {
        INFO(e.what());
        ok = false;
    }
    CHECK(ok);
    if (c.rank() == silent) {
        // Past everyone's bound; then it completes the split the others left to MPI (each runs
        // on a thread of its own), so that the suite can go on.
        std::this_thread::sleep_for(bound + 2000ms);
        MPI_Comm late = MPI_COMM_NULL;
        MPI_Comm_split(c.native(), 0, c.rank(), &late);
    } else {
        const auto t0 = std::chrono::steady_clock::now();
        std::string what;
        try {
            communicator never = c.split(0, c.rank());
        } catch (const tpipe::watchdog_error& e) {
            what = e.what();
        }
        const auto took = std::chrono::steady_clock::now() - t0;
        INFO(what);
        bool named = took >= bound && took < bound + 1000ms && contains(what, "process " + std::to_string(silent) + " is silent") &&
                     contains(what, "process " + std::to_string(c.rank()) + " waits in tpipe::mpi::communicator::split #");
        for (int m = 0; m < c.size() - 1; ++m)  // every other waiting member answered, and said where it waits
            if (m != c.rank()) named = named && contains(what, "process " + std::to_string(m) + " waits in tpipe::mpi::communicator::split #");
        CHECK(named);
        ok = ok && named;
        // The abandoned split returns once the silent member has come; only then may c be freed.
        const auto until = std::chrono::steady_clock::now() + 30s;
        while (tpipe::mpi::detail::setup_calls_running().load() > 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(1ms);
        CHECK(tpipe::mpi::detail::setup_calls_running().load() == 0);
    }
    tpipe::mpi::detail::unbound_setup();
    tpipe::mpi::detail::member_stalled().store(false);  // the suite goes on: the silent member came after all
    REQUIRE(tpipe_test::every_process(ok));
}

TEST_CASE("watchdog: a set-up call gives its value or its error, on a thread of its own when set-up is bounded",
          "[mpi][watchdog][setup]")
{
    using tpipe::mpi::detail::setup_run;
    const auto here = std::this_thread::get_id();
    for (const bool bounded : {false, true}) {
        CAPTURE(bounded);
        if (bounded) {
            MPI_Comm notes = MPI_COMM_NULL;  // what environment_options::watchdog does
            MPI_Comm_dup(MPI_COMM_WORLD, &notes);
            tpipe::mpi::detail::bound_setup(notes, 5000ms);
        }
        std::thread::id ran_on;
        CHECK(setup_run("a value", [&ran_on] {
                  ran_on = std::this_thread::get_id();
                  return std::string("made");
              }) == "made");
        CHECK((ran_on != here) == bounded);  // bounded: polled from here while it runs there
        bool ran = false;
        setup_run("no value", [&ran] { ran = true; });
        CHECK(ran);
        CHECK_THROWS_WITH(setup_run("an error", []() -> int { throw tpipe::invalid_argument("the call failed"); }),
                          "the call failed");
        CHECK(tpipe::mpi::detail::setup_calls_running().load() == 0);
        if (bounded) tpipe::mpi::detail::unbound_setup();
    }
}

TEST_CASE("watchdog: the environment refuses a negative set-up bound", "[mpi][watchdog][setup]")
{
    tpipe::mpi::environment_options o;
    o.watchdog = -5ms;
    bool refused = false;
    try {
        tpipe::mpi::environment again(o);  // MPI is up (the suite's): it would only check the thread level
    } catch (const tpipe::invalid_argument& e) {
        refused = contains(e.what(), "tpipe::mpi::environment: the watchdog bound -5 ms is negative; give a positive bound, or 0 for none");
    }
    REQUIRE(tpipe_test::every_process(refused));
}
