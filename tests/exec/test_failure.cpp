#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "pipes.hpp"
#include "tpipe/transport/composed_transport.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

//! Rank 0 forgets to send its forward output; rank 1 waits for it, and rank 0 then waits for a
//! gradient that rank 1 cannot produce (invalid: run only with validation off).
tpipe::program forward_never_sent()
{
    tpipe::program p;
    p.ranks = 2;
    p.stage_rank = {0, 1};
    p.units = tpipe::microbatches(1);
    p.actions = {{tpipe::parse_action("0F0"), tpipe::parse_action("0RECV_B0"), tpipe::parse_action("0B0")},
                 {tpipe::parse_action("1RECV_F0"), tpipe::parse_action("1F0"), tpipe::parse_action("1B0"),
                  tpipe::parse_action("1SEND_B0")}};
    return p;
}

//! Runs `name` on P ranks with a fault injected into stage `fs` at (microbatch, slice, kind);
//! checks that run throws one execution_error naming the right rank, stage, action and unit.
void check_fault(const tpipe::program& prog, tpipe::cpu_engine& eng, int fs, synth::fault f, tpipe::op expected)
{
    auto pipe = synth::make_uniform<true>(prog.stages(), fs, f);
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    io.output_grad = [](const tpipe::unit&, synth::vec&& y) { return synth::loss_grad(y); };
    tpipe::run_options opts;
    opts.watchdog = std::chrono::seconds(20);  // a hang would fail the test, not block the suite
    try {
        tpipe::run(pipe, prog, eng, io, opts);
        FAIL("run did not throw");
    } catch (const tpipe::execution_error& e) {
        CAPTURE(e.what());
        CHECK(e.stage() == fs);
        CHECK(e.rank() == prog.stage_rank[fs]);
        CHECK(e.failed_action().kind == expected);
        CHECK(e.failed_action().microbatch == f.microbatch);
        CHECK(e.failed_unit().microbatch == f.microbatch);
        CHECK(e.failed_unit().slice == f.slice);
        CHECK(contains(e.what(), "injected fault"));
        CHECK(contains(e.what(), "rank " + std::to_string(e.rank())));
        CHECK(contains(e.what(), "stage " + std::to_string(fs)));
        CHECK_THROWS_WITH(std::rethrow_exception(e.cause()), Catch::Contains("injected fault"));
    }
}

} // namespace

TEST_CASE("an exception in any stage, at forward or backward, cancels the iteration everywhere", "[exec][failure]")
{
    struct kase {
        const char* schedule;
        int P;
    };
    for (kase k : {kase{"gpipe", 2}, kase{"1f1b", 3}, kase{"interleaved", 2}, kase{"zb-h1", 3}, kase{"zb-v", 2},
                   kase{"terapipe-1f1b", 2}}) {
        tpipe::cpu_engine eng(k.P);
        const auto prog = tpipe::make_schedule(k.schedule).program(tpipe::topology{k.P}, tpipe::microbatches(2 * k.P, 2));
        const bool split = std::string(k.schedule).rfind("zb", 0) == 0;
        for (int fs = 0; fs < prog.stages(); ++fs)
            for (char kind : {'F', 'B', 'W'}) {
                if (kind == 'W' && !split) continue;
                const synth::fault f{1, 1, kind};
                const tpipe::op expected = kind == 'F' ? tpipe::op::F : kind == 'W' ? tpipe::op::W : split ? tpipe::op::I : tpipe::op::B;
                CAPTURE(k.schedule, k.P, fs, kind);
                check_fault(prog, eng, fs, f, expected);
            }
        // The engine is still good for a clean iteration afterwards.
        auto pipe = synth::make_uniform<true>(prog.stages());
        tpipe::io_for<decltype(pipe)> io;
        io.source = synth::source;
        CHECK_NOTHROW(tpipe::run(pipe, prog, eng, io));
    }
}

TEST_CASE("an exception from the user's source or loss callable is reported like a stage's", "[exec][failure]")
{
    tpipe::cpu_engine eng(2);
    auto pipe = synth::make_pipe<true>(std::make_index_sequence<2>{});
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{2}, tpipe::microbatches(4));
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit& u) {
        if (u.microbatch == 2) throw std::runtime_error("no data for microbatch 2");
        return synth::source(u);
    };
    try {
        tpipe::run(pipe, prog, eng, io);
        FAIL("run did not throw");
    } catch (const tpipe::execution_error& e) {
        CHECK(e.rank() == 0);
        CHECK(to_string(e.failed_action()) == "0F2");
        CHECK(contains(e.what(), "no data for microbatch 2"));
    }
    io.source = synth::source;
    io.output_grad = [](const tpipe::unit&, synth::vec&&) -> synth::vec { throw 42; };  // not a std::exception
    auto fresh = synth::make_pipe<true>(std::make_index_sequence<2>{});
    try {
        tpipe::run(fresh, prog, eng, io);
        FAIL("run did not throw");
    } catch (const tpipe::execution_error& e) {
        CHECK(e.rank() == 1);
        CHECK(e.failed_action().kind == tpipe::op::F);
        CHECK(e.failed_action().microbatch == 0);
        CHECK(contains(e.what(), "not derived from std::exception"));
    }
}

TEST_CASE("the watchdog turns a receive that never comes into an error naming every wait", "[exec][failure][watchdog]")
{
    const tpipe::program p = forward_never_sent();
    tpipe::cpu_engine eng(2);
    auto pipe = synth::make_pipe<true>(std::make_index_sequence<2>{});
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    CHECK_THROWS_AS(tpipe::run(pipe, p, eng, io), tpipe::invalid_program);  // validation sees it first
    tpipe::run_options opts;
    opts.validate = false;
    opts.watchdog = std::chrono::milliseconds(200);
    try {
        tpipe::run(pipe, p, eng, io, opts);
        FAIL("run did not throw");
    } catch (const tpipe::watchdog_error& e) {
        CAPTURE(e.what());
        CHECK(contains(e.what(), "rank 0 (device 0) waits at action #2 '0B0' for '1SEND_B0' from rank 1 (not reached yet)"));
        CHECK(contains(e.what(), "rank 1 (device 1) waits at action #1 '1F0' for '0SEND_F0' from rank 0 (which never sends it)"));
    }
    // Both ranks placed on one device: the same diagnosis, and nothing is left behind.
    opts.device_of_rank = {0, 0};
    auto fresh = synth::make_pipe<true>(std::make_index_sequence<2>{});
    CHECK_THROWS_AS(tpipe::run(fresh, p, eng, io, opts), tpipe::watchdog_error);
}

TEST_CASE("without validation the runner still refuses what it would index by: stages, ranks, units", "[exec][failure]")
{
    tpipe::cpu_engine eng(2);
    auto pipe = synth::make_pipe<true>(std::make_index_sequence<2>{});
    tpipe::run_options opts;
    opts.validate = false;
    auto refused = [&](tpipe::program p, const std::string& what) {
        try {
            tpipe::runner r(pipe, p, eng, opts);
            FAIL("the runner took the program");
        } catch (const tpipe::invalid_program& e) {
            CAPTURE(e.what());
            CHECK(contains(e.what(), what));
        }
    };
    const auto base = [] { return tpipe::lower(tpipe::gpipe{}.program(tpipe::topology{2}, tpipe::microbatches(2))); };
    auto wrong_rank = base();
    wrong_rank.actions[0][0].stage = 1;
    refused(wrong_rank, "rank 0, action #0 '1F0': stage 1 is placed on rank 1");
    auto no_stage = base();
    no_stage.actions[1][0].stage = 7;
    refused(no_stage, "stage 7 does not exist");
    auto no_unit = base();
    no_unit.actions[0][0].microbatch = 9;
    refused(no_unit, "is not a unit of this iteration");
    auto forward_only = base();  // not a whole iteration, but every action is addressable: it runs
    for (auto& row : forward_only.actions)
        std::erase_if(row, [](const tpipe::action& a) { return a.kind == tpipe::op::B || a.kind == tpipe::op::SEND_B ||
                                                                a.kind == tpipe::op::RECV_B; });
    CHECK_THROWS_AS(tpipe::validate(forward_only), tpipe::invalid_program);
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    tpipe::runner r(pipe, forward_only, eng, opts);
    CHECK_NOTHROW(r.run(io));
}

TEST_CASE("cancellation wakes receivers blocked on other devices", "[exec][failure]")
{
    // Stage 0 fails at its first forward while every other rank already waits in a receive.
    for (int P = 2; P <= 4; ++P) {
        tpipe::cpu_engine eng(P);
        const auto prog = tpipe::gpipe{}.program(tpipe::topology{P}, tpipe::microbatches(3));
        check_fault(prog, eng, 0, synth::fault{0, 0, 'F'}, tpipe::op::F);
    }
}

TEST_CASE("a runner is exact again after a failed iteration (what the failure left behind is dropped)", "[exec][failure]")
{
    tpipe::cpu_engine eng(3);
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{3}, tpipe::microbatches(4, 2));
    auto pipe = synth::make_pipe<true>(std::make_index_sequence<3>{}, 2, synth::fault{2, 1, 'B'});
    std::vector<synth::vec> outputs(static_cast<std::size_t>(prog.units.units()));
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    io.output_grad = [&](const tpipe::unit& u, synth::vec&& y) {
        outputs[static_cast<std::size_t>(prog.units.index(u.microbatch, u.slice))] = y;
        return synth::loss_grad(y);
    };
    tpipe::runner r(pipe, prog, eng);
    // The fault hits in the middle: sent activations and gradients are left undelivered.
    CHECK_THROWS_AS(r.run(io), tpipe::execution_error);

    pipe.stage<2>().f = synth::fault{};
    auto clean = [](auto& p) {
        [&]<std::size_t... I>(std::index_sequence<I...>) { ((p.template stage<I>().st = synth::stage_state{}), ...); }(
            std::make_index_sequence<3>{});
    };
    clean(pipe);
    auto ref = synth::make_pipe<true>(std::make_index_sequence<3>{});
    const auto want = synth::sequential(ref, prog.units);
    for (int it = 0; it < 2; ++it) {
        CAPTURE(it);
        if (it > 0) clean(pipe);
        std::fill(outputs.begin(), outputs.end(), synth::vec{});
        const auto stats = r.run(io);
        CHECK(outputs == want.outputs);
        CHECK(synth::states_of(pipe) == want.states);
        CHECK(stats.actions == r.lowered_program().size());
    }
}

namespace {
//! A stage whose forward of microbatch 1 on stage 1 does not return until `release` is set.
struct blocking_stage {
    using input = double;
    using output = double;
    std::atomic<bool>* release = nullptr;
    int index = 0;
    std::atomic<bool>* entered = nullptr;  //!< set when the forward starts blocking
    double forward(const tpipe::unit& u, double x)
    {
        if (index == 1 && u.microbatch == 1) {
            if (entered) *entered = true;
            while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return x + 1;
    }
    double backward(const tpipe::unit&, double g) { return g; }
};
} // namespace

TEST_CASE("the watchdog reports a stage function that never returns, naming rank, stage, action and unit",
          "[exec][failure][watchdog]")
{
    std::atomic<bool> release{false};
    tpipe::uniform_pipeline<blocking_stage> pipe(
        std::vector<blocking_stage>{blocking_stage{&release, 0}, blocking_stage{&release, 1}});
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{2}, tpipe::microbatches(3));
    tpipe::cpu_engine eng(2);
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit&) { return 0.0; };
    tpipe::run_options opts;
    opts.watchdog = std::chrono::milliseconds(200);
    std::string stuck;
    int calls = 0;
    opts.on_stuck = [&](const std::string& report) {  // the compute cannot be cancelled: told, then released
        stuck = report;
        ++calls;
        release = true;
    };
    const auto t0 = std::chrono::steady_clock::now();
    try {
        tpipe::run(pipe, prog, eng, io, opts);
        FAIL("run did not throw");
    } catch (const tpipe::watchdog_error& e) {
        CAPTURE(e.what());
        CHECK(contains(e.what(), "rank 1 (device 1) is running at action #"));
        CHECK(contains(e.what(), "of stage 1 '1F1' (microbatch 1, slice 0"));
        CHECK(contains(e.what(), "(the stage function has not returned)"));
    }
    CHECK(calls == 1);
    CAPTURE(stuck);
    CHECK(contains(stuck, "of stage 1 '1F1' (microbatch 1"));
    CHECK(contains(stuck, "run() returns (throwing this error) once the stage function does"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
}

TEST_CASE("two threads calling run on one runner at once: the second is refused, naming the runner",
          "[exec][failure]")
{
    std::atomic<bool> release{false}, entered{false};
    tpipe::uniform_pipeline<blocking_stage> pipe(std::vector<blocking_stage>{
        blocking_stage{&release, 0, nullptr}, blocking_stage{&release, 1, &entered}});
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{2}, tpipe::microbatches(3));
    tpipe::cpu_engine eng(2);
    tpipe::runner r(pipe, prog, eng);
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit&) { return 0.0; };
    std::thread first([&] { r.run(io); });  // blocks in stage 1's forward of microbatch 1 until released
    while (!entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::string message;
    try {
        r.run(io);
    } catch (const tpipe::error& e) {
        message = e.what();
    }
    release = true;
    first.join();
    CAPTURE(message);
    CHECK(contains(message, "this runner (2 stages on 2 ranks, 3 units) is already running an iteration on another thread"));
    CHECK_NOTHROW(r.run(io));  // usable again once the first run returned
}

TEST_CASE("run_options::stop ends the iteration on every rank with stopped_error, and every later run before any "
          "stage runs",
          "[exec][failure][stop]")
{
    for (int P = 2; P <= 4; ++P) {
        CAPTURE(P);
        const auto prog = tpipe::gpipe{}.program(tpipe::topology{P}, tpipe::microbatches(4));
        tpipe::cpu_engine eng(P);
        auto pipe = synth::make_uniform<true>(prog.stages());
        std::stop_source user;
        std::atomic<int> sources{0};
        tpipe::io_for<decltype(pipe)> io;
        io.source = [&](const tpipe::unit& u) {
            ++sources;
            if (u.microbatch == 2) user.request_stop();  // from rank 0's loop, while the others wait in receives
            return synth::source(u);
        };
        tpipe::run_options opts;
        opts.stop = user.get_token();
        opts.watchdog = std::chrono::seconds(20);  // a hang would fail the test, not block the suite
        tpipe::runner r(pipe, prog, eng, opts);
        CHECK_THROWS_WITH(r.run(io), Catch::Contains("run_options::stop was requested") &&
                                         Catch::Contains("incomplete (do not step the optimizer on them)"));
        CHECK(sources == 3);  // rank 0 stopped at its next action
        CHECK_THROWS_AS(r.run(io), tpipe::stopped_error);
        CHECK(sources == 3);  // a stopped run starts no stage

        // A runner whose token is not stopped runs as before: the same engine, exact.
        tpipe::run_options fresh;
        std::stop_source never;
        fresh.stop = never.get_token();
        auto again = synth::make_uniform<true>(prog.stages());
        tpipe::io_for<decltype(again)> clean;
        clean.source = synth::source;
        CHECK_NOTHROW(tpipe::runner(again, prog, eng, fresh).run(clean));
    }
}

namespace {
//! A link transport with every rank here that records the watchdog's reports (stalled), as
//! tpipe::mpi::transport reports them.
struct stall_recording final : tpipe::all_here {
    std::vector<std::string> reports;
    void stalled(const std::string& report) noexcept override { reports.push_back(report); }
};
} // namespace

TEST_CASE("a composed transport passes the watchdog's report to both of its transports", "[exec][failure][watchdog]")
{
    const tpipe::program p = forward_never_sent();  // rank 0 never sends its forward output
    tpipe::cpu_engine eng(2);
    tpipe::run_options opts;
    opts.validate = false;
    opts.watchdog = std::chrono::milliseconds(200);
    // One stalled iteration through `between` (MPI's place) and `within` composed.
    auto stall_through = [&](tpipe::link_transport& between, stall_recording& within) {
        auto pipe = synth::make_pipe<true>(std::make_index_sequence<2>{});
        tpipe::io_for<decltype(pipe)> io;
        io.source = synth::source;
        tpipe::composed_transport x(between, within);
        tpipe::runner r(pipe, p, eng, x, opts);
        CHECK_THROWS_AS(r.run(io), tpipe::watchdog_error);
    };
    {
        stall_recording between, within;
        stall_through(between, within);
        REQUIRE(between.reports.size() == 1);
        REQUIRE(within.reports.size() == 1);
        CHECK(contains(between.reports[0], "rank 1 (device 1) waits at action #1 '1F0' for '0SEND_F0' from rank 0"));
        CHECK(within.reports[0] == between.reports[0]);
    }
    {
        tpipe::all_here between;  // reports nowhere
        stall_recording within;
        stall_through(between, within);
        CHECK(within.reports.size() == 1);
    }
}
