// The runner over MPI processes (tpipe::mpi::transport) under mpiexec -np 2, 3, 4: every process
// builds the same pipeline and program, runs its own ranks, and must compute exactly what the same
// program computes on threads in one process (integer stages: bitwise).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../exec/copying_transport.hpp"
#include "../exec/pipes.hpp"
#include "mpi_suite.hpp"
#include "synthetic_run.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/transport/composed_transport.hpp"
#include "tpipe/mpi/agree.hpp"
#include "tpipe/mpi/transport.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

using tpipe_test::matches;
using tpipe_test::outcome;
using tpipe_test::run_synthetic;
using tpipe_test::world_rank;
using tpipe_test::world_size;

TEST_CASE("pipelined over processes equals the same program on threads, for every schedule and slicing", "[mpi][run]")
{
    const int n = world_size();
    int ran = 0;
    for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved", "zb-v", "terapipe-gpipe", "terapipe-1f1b"}) {
        for (int slices : {1, 3}) {
            if (std::string(name).rfind("terapipe", 0) != 0 && slices > 1 && std::string(name) != "1f1b") continue;
            const auto units = slices == 1 ? tpipe::microbatches(2 * n) : tpipe::microbatches(n, slices);
            const auto prog = tpipe::make_schedule(name).program(tpipe::topology{n}, units);
            CAPTURE(name, slices, n);
            const outcome want = run_synthetic<tpipe::local_transport>(prog, nullptr, n);
            tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n), 0);
            const outcome got = run_synthetic(prog, &x, 1);
            REQUIRE(tpipe_test::every_process(matches(prog, x, got, want)));
            ++ran;
        }
    }
    CHECK(ran == 10);
}

TEST_CASE("threads and processes run the one runner type", "[mpi][run]")
{
    const int n = world_size();
    auto pipe = synth::make_uniform<true>(n);
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{n}, tpipe::microbatches(2 * n));
    tpipe::cpu_engine eng(1);
    tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n), 0);
    tpipe::runner over_processes(pipe, prog, eng, x);
    static_assert(std::is_same_v<decltype(over_processes), decltype(tpipe::runner(pipe, prog, eng))>,
                  "a tpipe::link_transport model runs the runner type of threads");
    static_assert(std::is_same_v<decltype(over_processes), tpipe::runner<decltype(pipe), tpipe::cpu_engine>>);
    REQUIRE(over_processes.local_ranks() == std::vector<int>{world_rank()});
}

TEST_CASE("several ranks per process: boundaries inside a process stay local, the others cross", "[mpi][run]")
{
    const int n = world_size();
    const int P = 2 * n;  // ranks 2p and 2p+1 on process p
    std::vector<int> layout;
    for (int r = 0; r < P; ++r) layout.push_back(r / 2);
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{P}, tpipe::microbatches(P, 2));
    const outcome want = run_synthetic<tpipe::local_transport>(prog, nullptr, P);
    tpipe::mpi::transport x(tpipe::layout(P, 1, layout), 0);
    const outcome got = run_synthetic(prog, &x, P);
    REQUIRE(tpipe_test::every_process(matches(prog, x, got, want)));
}

TEST_CASE("composed transports: copies inside a process, MPI between processes, one pipeline", "[mpi][run]")
{
    const int n = world_size();
    const int P = 2 * n;  // ranks 2p and 2p+1 on process p: boundary 2p inside, 2p+1 between
    std::vector<int> layout;
    for (int r = 0; r < P; ++r) layout.push_back(r / 2);
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{P}, tpipe::microbatches(P, 2));
    const outcome want = run_synthetic<tpipe::local_transport>(prog, nullptr, P);
    tpipe::mpi::transport between(tpipe::layout(P, 1, layout), 0);
    tpipe_test::copying_transport within;  // stands for GPU peer copies
    tpipe::composed_transport x(between, within);
    const outcome got = run_synthetic(prog, &x, P);
    REQUIRE(tpipe_test::every_process(matches(prog, between, got, want)));
    // This process's one inside boundary, both directions, got the copying links; each
    // carried every unit's activation or gradient, in each of the two iterations.
    const int units = prog.units.units();
    CHECK(within.opened == 2);
    CHECK(within.copies == 2 * 2 * units);
}

TEST_CASE("a launch that does not fit the world is refused on every process with the same message", "[mpi][failure]")
{
    const int n = world_size();
    std::string message;
    try {
        tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n + 1), 0);
    } catch (const tpipe::invalid_argument& e) {
        message = e.what();
    }
    CAPTURE(message);
    REQUIRE(tpipe_test::every_process(message.find("launch it with mpirun -np " + std::to_string(n + 1)) !=
                                      std::string::npos));
}

TEST_CASE("processes that build different programs are refused before the first iteration", "[mpi][failure]")
{
    const int n = world_size();
    tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n), 0);
    // The last process builds one microbatch more than the others.
    const int M = 2 * n + (world_rank() == n - 1 ? 1 : 0);
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{n}, tpipe::microbatches(M));
    auto pipe = synth::make_uniform<true>(n);
    tpipe::cpu_engine eng(1);
    std::string message;
    try {
        tpipe::runner r(pipe, prog, eng, x);
    } catch (const tpipe::invalid_argument& e) {
        message = e.what();
    }
    CAPTURE(message);
    REQUIRE(tpipe_test::every_process(message.find("launched with different configurations: units is") != std::string::npos &&
                                      message.find("on process " + std::to_string(n - 1)) != std::string::npos));
}

TEST_CASE("processes whose units differ in rows or tokens but not in count are refused, naming both", "[mpi][failure]")
{
    const int n = world_size();
    const bool last = world_rank() == n - 1;
    using mb = tpipe::scheme::microbatch;
    // Token cuts 32,96 against 96,32 (the same count), and 2-row microbatches against 3-row ones
    // (another batch, the same count).
    const std::vector<std::pair<tpipe::scheme, std::string>> variants{
        {tpipe::scheme({mb{0, 4, last ? std::vector<std::int64_t>{0, 96, 128} : std::vector<std::int64_t>{0, 32, 128}}}),
         last ? "[0,4)x[0,96)" : "[0,4)x[0,32)"},
        {tpipe::scheme({mb{0, last ? 3 : 2, {0, 64}}, mb{last ? 3 : 2, last ? 6 : 4, {0, 64}}}), last ? "[0,3)x[0,64)" : "[0,2)x[0,64)"},
    };
    for (const auto& [units, mine] : variants) {
        tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n, 1), 0);
        const auto prog = tpipe::make_schedule("terapipe-gpipe").program(tpipe::topology{n}, units);
        auto pipe = synth::make_uniform<true>(n);
        tpipe::cpu_engine eng(1);
        std::string message;
        try {
            tpipe::runner r(pipe, prog, eng, x);
        } catch (const tpipe::invalid_argument& e) {
            message = e.what();
        }
        CAPTURE(message);
        const std::string other = last ? (mine == "[0,4)x[0,96)" ? "[0,4)x[0,32)" : "[0,2)x[0,64)")
                                       : (mine == "[0,4)x[0,32)" ? "[0,4)x[0,96)" : "[0,3)x[0,64)");
        REQUIRE(tpipe_test::every_process(message.find("launched with different configurations: unit rows x tokens is") != std::string::npos &&
                                          message.find(mine) != std::string::npos && message.find(other) != std::string::npos &&
                                          message.find("on process " + std::to_string(n - 1)) != std::string::npos));
    }
}

TEST_CASE("processes launched with different flags are refused on every process, naming the field and the processes",
          "[mpi][failure]")
{
    const int n = world_size();
    if (n < 2) return;
    // The last process was started with --layers 2, the others with --layers 4 (an MPMD launch).
    const int layers = world_rank() == n - 1 ? 2 : 4;
    const auto text = tpipe::fingerprint().add("binary", "same").add("--layers", layers).add("--lr", 1e-3).text();
    std::string message;
    try {
        tpipe::mpi::agree(MPI_COMM_WORLD, text, "train");
    } catch (const tpipe::invalid_argument& e) {
        message = e.what();
    }
    CAPTURE(message);
    const std::string others = n == 2 ? "process 0" : "processes 0, 1" + std::string(n > 3 ? ", 2" : "");
    REQUIRE(tpipe_test::every_process(message == "train: the processes of this job were launched with different "
                                                 "configurations: --layers is \"4\" on " + others + " and \"2\" on process " +
                                                     std::to_string(n - 1) + " (every process must run the same binary "
                                                     "with the same flags and data)"));
    // Alike, the agreement passes and costs one collective.
    REQUIRE_NOTHROW(tpipe::mpi::agree(MPI_COMM_WORLD, tpipe::fingerprint().add("--layers", 4).text()));
}

TEST_CASE("receives posted out of the peer's send order run correctly over MPI", "[mpi]")
{
    if (world_size() != 2) return;
    const auto prog = tpipe::from_csv("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0RECV_B1,0B0,0B1\n"
                                      "1RECV_F1,1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
    tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(2), 0);
    auto pipe = synth::make_uniform<false>(2);
    auto ref = synth::make_uniform<false>(2);
    const auto want = synth::sequential(ref, prog.units);
    tpipe::cpu_engine eng(1);
    std::vector<synth::vec> outputs(static_cast<std::size_t>(prog.units.units()));
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    io.output_grad = [&](const tpipe::unit& u, synth::vec&& y) {
        outputs[static_cast<std::size_t>(prog.units.index(u.microbatch, u.slice))] = y;
        return synth::loss_grad(y);
    };
    tpipe::runner r(pipe, prog, eng, x);
    r.run(io);
    // The last stage runs on process 1: its outputs and both stages' states equal the sequential run's.
    const bool ok = world_rank() == 1 ? outputs == want.outputs && synth::states_of(pipe)[1] == want.states[1]
                                      : synth::states_of(pipe)[0] == want.states[0];
    REQUIRE(tpipe_test::every_process(ok));
}

TEST_CASE("a stage that throws on one process stops every process with an error naming it", "[mpi][failure]")
{
    const int n = world_size();
    const int faulty = n - 1;  // the last stage fails at the backward of microbatch 1
    tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n), 0);
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{n}, tpipe::microbatches(2 * n));
    auto pipe = synth::make_uniform<true>(n, faulty, synth::fault{1, 0, 'B'});
    tpipe::cpu_engine eng(1);
    tpipe::run_options opts;
    opts.watchdog = std::chrono::seconds(20);
    tpipe::runner r(pipe, prog, eng, x, opts);
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    std::string message;
    bool right_kind = false;
    const auto start = std::chrono::steady_clock::now();
    try {
        r.run(io);
    } catch (const tpipe::execution_error& e) {
        message = e.what();
        right_kind = world_rank() == faulty;
    } catch (const tpipe::peer_error& e) {
        message = e.what();
        right_kind = world_rank() != faulty;
    } catch (const std::exception& e) {
        message = e.what();
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CAPTURE(message, waited);
    const bool names_it = message.find("injected fault") != std::string::npos &&
                          (world_rank() == faulty || message.find("process " + std::to_string(faulty)) != std::string::npos);
    REQUIRE(tpipe_test::every_process(right_kind && names_it && waited < 10));
    CHECK_THROWS_WITH(r.run(io), Catch::Contains("build a new transport and runner"));
}

TEST_CASE("a pipeline payload moves while either end computes (an MPI link and the progress thread)", "[mpi][progress]")
{
    using bytes = std::vector<std::byte>;
    constexpr std::size_t size = std::size_t{64} << 20;
    constexpr auto compute = std::chrono::milliseconds(1000);
    auto busy = [&] { tpipe_test::compute_for(compute); };
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    const int me = world_rank();
    // (b) The receiver computes right after posting: when it is done, the payload is there.
    // (a) The sender computes right after its send: the idle receiver has the payload early.
    double a = 0;
    bool b = true;
    MPI_Barrier(MPI_COMM_WORLD);
    if (me == 0) {
        tpipe::linked_channel<bytes> out(std::make_unique<tpipe::mpi::link>(comm, 1, 0, 2), tpipe::channel_end::sender, 2);
        out.send(0, bytes(size, std::byte{1}));
        tpipe::sync_wait([](tpipe::linked_channel<bytes>& c) -> tpipe::task<void> { co_await c.drain(); }(out));
        MPI_Barrier(MPI_COMM_WORLD);
        out.send(1, bytes(size, std::byte{2}));
        busy();
        tpipe::sync_wait([](tpipe::linked_channel<bytes>& c) -> tpipe::task<void> { co_await c.drain(); }(out));
    } else if (me == 1) {
        tpipe::linked_channel<bytes> in(std::make_unique<tpipe::mpi::link>(comm, 0, 0, 2), tpipe::channel_end::receiver, 2);
        in.post(0);
        busy();  // meanwhile rank 0 sends tag 0
        b = in.ready(0) && in.take(0).back() == std::byte{1};
        MPI_Barrier(MPI_COMM_WORLD);
        const auto start = std::chrono::steady_clock::now();
        tpipe::sync_wait([](tpipe::linked_channel<bytes>& c) -> tpipe::task<void> { co_await c.arrival(1); }(in));
        a = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        b = b && in.take(1).size() == size;
    } else {
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Comm_free(&comm);
    if (me == 1) std::printf("channel progress: 64 MiB arrived %.3f s after the send (the sender computes 1 s); "
                             "the payload posted before a 1 s compute was there at its end: %s\n", a, b ? "yes" : "no");
    CAPTURE(a, b);
    REQUIRE(tpipe_test::every_process(a < 0.5 && b));
}
