// tpipe::ucx::link_engine (tpipe/ucx/link.hpp): the byte link over UCX under the MPI suite
// (mpiexec -np 2, 3, 4). The pipeline's payloads cross processes over UCX and every process
// computes exactly what the same program computes on threads; a payload of another size than the
// receiver's is refused naming both; processes whose engines differ are refused, never left
// waiting for messages that go elsewhere.
#include <catch2/catch.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
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
        tpipe::linked_channel<skewed> out(ucx.open(e, n - 1), true, 1);
        out.send(0, skewed{std::vector<std::int32_t>(1000, 7)});
        tpipe::sync_wait([](tpipe::linked_channel<skewed>& c) -> tpipe::task<void> { co_await c.drain(); }(out));
    } else if (me == n - 1) {
        tpipe::linked_channel<skewed> in(ucx.open(e, n - 2), false, 1);
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
