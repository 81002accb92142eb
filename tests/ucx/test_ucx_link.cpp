// tpipe::ucx::link_engine (tpipe/ucx/link.hpp): the byte link over UCX under the MPI suite
// (mpiexec -np 2, 3, 4). The pipeline's payloads cross processes over UCX and every process
// computes exactly what the same program computes on threads; a payload of another size than the
// receiver's is refused naming both; processes whose engines differ are refused, never left
// waiting for messages that go elsewhere; a body moves while its receiver computes.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../mpi/mpi_suite.hpp"
#include "../mpi/synthetic_run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/mpi/job.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"
#include "tpipe/transport/linked_channel.hpp"
#include "tpipe/ucx/link.hpp"

namespace {
//! A payload whose receiver makes one more element than its header says on the last process
//! (a payload_traits that disagrees across processes).
struct skewed {
    std::vector<std::int32_t> v;
};
} // namespace

template <>
struct tpipe::payload_traits<skewed> {
    struct header {
        std::uint64_t count;
    };
    static header header_of(const skewed& s) { return {s.v.size()}; }
    static skewed make(const header& h)
    {
        const bool last = tpipe_test::world_rank() == tpipe_test::world_size() - 1;
        return {std::vector<std::int32_t>(static_cast<std::size_t>(h.count) + (last ? 1 : 0))};
    }
    static std::span<const std::byte> bytes(const skewed& s) { return std::as_bytes(std::span(s.v)); }
    static std::span<std::byte> bytes(skewed& s) { return std::as_writable_bytes(std::span(s.v)); }
};

TEST_CASE("payloads over UCX (a job's links): the pipeline equals the same program on threads, for every schedule", "[mpi][ucx]")
{
    const int n = tpipe_test::world_size();
    for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved", "zb-v", "terapipe-1f1b"}) {
        const auto units = std::string(name) == "terapipe-1f1b" ? tpipe::microbatches(n, 3) : tpipe::microbatches(2 * n);
        const auto prog = tpipe::make_schedule(name).program(tpipe::topology{n}, units);
        CAPTURE(name, n);
        const auto want = tpipe_test::run_synthetic<tpipe::local_transport>(prog, nullptr, n);
        // [snippet:job]
        tpipe::mpi::job job({.pipeline_ranks = n}, MPI_COMM_WORLD, tpipe::ucx::links);  // payloads over UCX
        tpipe::mpi::transport& x = job.transport();
        // [/snippet]
        REQUIRE(x.links().name() == "UCX");
        const auto got = tpipe_test::run_synthetic(prog, &x, 1);
        REQUIRE(tpipe_test::every_process(tpipe_test::matches(prog, x, got, want)));
    }
}

TEST_CASE("a UCX payload of another size than the receiver makes is refused, naming both sizes", "[mpi][ucx][failure]")
{
    const int n = tpipe_test::world_size(), me = tpipe_test::world_rank();
    tpipe::ucx::link_engine ucx(MPI_COMM_WORLD);
    tpipe::endpoint e{.boundary = n - 2, .forward = true, .from_rank = n - 2, .to_rank = n - 1, .sending = me == n - 2, .tags = 1};
    std::string message;
    if (me == n - 2) {
        tpipe::linked_channel<skewed> out(ucx.open(e, n - 1), tpipe::channel_end::sender, 1);
        out.send(0, skewed{std::vector<std::int32_t>(1000, 7)});
        tpipe::sync_wait([](tpipe::linked_channel<skewed>& c) -> tpipe::task<void> { co_await c.drain(); }(out));
    } else if (me == n - 1) {
        tpipe::linked_channel<skewed> in(ucx.open(e, n - 2), tpipe::channel_end::receiver, 1);
        try {
            tpipe::sync_wait([](tpipe::linked_channel<skewed>& c) -> tpipe::task<void> { co_await c.arrival(0); }(in));
        } catch (const tpipe::error& err) {
            message = err.what();
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    CAPTURE(message);
    REQUIRE(tpipe_test::every_process(me != n - 1 || (message.find("has 4000 bytes, but this process expects 4004") != std::string::npos &&
                                                      message.find("from process " + std::to_string(n - 2)) != std::string::npos)));
}

TEST_CASE("processes whose payloads would travel over different engines are refused on every process", "[mpi][ucx][failure]")
{
    const int n = tpipe_test::world_size();
    tpipe::ucx::link_engine ucx(MPI_COMM_WORLD);
    const bool first = tpipe_test::world_rank() == 0;
    std::string message;
    try {
        tpipe::mpi::transport x(tpipe::layout::one_rank_per_process(n), tpipe::pipeline_id{}, MPI_COMM_WORLD, first ? &ucx : nullptr);
    } catch (const tpipe::invalid_argument& err) {
        message = err.what();
    }
    CAPTURE(message);
    REQUIRE(tpipe_test::every_process(message.find("payload link engine") != std::string::npos &&
                                      message.find("UCX") != std::string::npos && message.find("MPI") != std::string::npos));
}

TEST_CASE("a UCX body moves while its receiver computes (MPI's progress thread drives the link)", "[mpi][ucx][progress]")
{
    const int me = tpipe_test::world_rank();
    constexpr std::size_t bytes = std::size_t{64} << 20;  // a rendezvous: it moves only once the receiver posts its body
    constexpr auto compute = std::chrono::milliseconds(1000);
    tpipe::ucx::link_engine ucx(MPI_COMM_WORLD);
    const tpipe::endpoint e{.boundary = 0, .forward = true, .from_rank = 0, .to_rank = 1, .sending = me == 0, .tags = 1};
    using payload = std::vector<std::byte>;
    // Process 0 sends and measures when its send completes; process 1 posts the receive, then
    // computes for 1 s without calling UCX or MPI, then waits for the payload.
    auto trial = [&]() -> double {
        MPI_Barrier(MPI_COMM_WORLD);
        double sent_after = 0;
        if (me == 0) {
            tpipe::linked_channel<payload> out(ucx.open(e, 1), tpipe::channel_end::sender, 1);
            const auto start = std::chrono::steady_clock::now();
            out.send(0, payload(bytes, std::byte{3}));
            tpipe::sync_wait([](tpipe::linked_channel<payload>& c) -> tpipe::task<void> { co_await c.drain(); }(out));
            sent_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        } else if (me == 1) {
            tpipe::linked_channel<payload> in(ucx.open(e, 0), tpipe::channel_end::receiver, 1);
            in.post(0);
            tpipe_test::compute_for(compute);
            tpipe::sync_wait([](tpipe::linked_channel<payload>& c) -> tpipe::task<void> { co_await c.arrival(0); }(in));
            CHECK(in.take(0) == payload(bytes, std::byte{3}));  // not REQUIRE: the others wait in the all-reduce below
        } else {
            std::this_thread::sleep_for(compute + std::chrono::milliseconds(100));  // stay off the cores
        }
        return tpipe_test::slowest(sent_after);
    };
    const auto [with, without] = tpipe_test::with_and_without_progress(trial);
    if (me == 0)
        std::printf("UCX progress check (%d ranks): 64 MiB sent after %.3f s with the progress thread, %.3f s without; the receiver "
                    "computes for 1 s\n",
                    tpipe_test::world_size(), with, without);
    REQUIRE(with < 0.5);
    REQUIRE(without > 0.9);  // the receiver posts the body only when something polls its link
}
