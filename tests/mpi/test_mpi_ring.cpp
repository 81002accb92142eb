// tpipe::mpi::communicator's reduction orders under mpiexec -np 2, 3, 4: the ring gives the
// ring order of tpipe/comm/reduction_order.hpp (written out independently in
// tests/comm/reduction_values.hpp) and the same bits as tpipe::thread_communicator run with as
// many threads in this process; reduce_scatter_sum / all_gather; the traffic a ring moves;
// the rank-order and native modes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <thread>
#include <vector>

#include "../comm/reduction_values.hpp"
#include "mpi_suite.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/mpi/communicator.hpp"

using tpipe::task;
using tpipe::mpi::communicator;
using tpipe_test::bitwise_equal;
using tpipe_test::values_of;

namespace {

bool all_ranks(bool ok) { return tpipe_test::every_process(ok); }

template <class T>
std::vector<T> all_reduce(communicator& c, std::vector<T> v)
{
    tpipe::sync_wait([](communicator& cc, std::vector<T>& x) -> task<void> { co_await cc.all_reduce_sum(std::span<T>(x)); }(c, v));
    return v;
}

//! The same all-reduce on d threads of this process (thread_communicator's default order).
template <class T>
std::vector<T> on_threads(int d, std::size_t n)
{
    tpipe::thread_group g(d);
    std::vector<std::vector<T>> out(static_cast<std::size_t>(d));
    std::vector<std::thread> threads;
    for (int i = 0; i < d; ++i)
        threads.emplace_back([&, i] {
            tpipe::sync_wait([](tpipe::thread_communicator c, std::vector<T>& x) -> task<void> {
                x = values_of<T>(c.rank(), x.size());
                co_await c.all_reduce_sum(std::span<T>(x));
            }(g.member(i), out[static_cast<std::size_t>(i)] = std::vector<T>(n)));
        });
    for (auto& t : threads) t.join();
    return out[0];
}

} // namespace

TEMPLATE_TEST_CASE("mpi ring all_reduce_sum is the documented ring order and equals threads bitwise", "[mpi][ring]", float, double,
                   std::int32_t, std::int64_t)
{
    communicator world = communicator::world();
    const int d = world.size();
    REQUIRE(world.order() == tpipe::reduction_order::ring);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(d - 1), static_cast<std::size_t>(d + 1),
                          std::size_t{1001}, std::size_t{100003}})
        for (std::size_t chunk : {std::size_t{1} << 20, std::size_t{64}, std::size_t{sizeof(TestType)}}) {
            if (chunk == sizeof(TestType) && n > 2000) continue;  // one element per message: keep it short
            CAPTURE(n, chunk);
            world.set_chunk_bytes(chunk);
            const auto expected = tpipe_test::ring_order_sum<TestType>(d, n);
            const auto got = all_reduce(world, values_of<TestType>(world.rank(), n));
            REQUIRE(all_ranks(bitwise_equal(got, expected)));
            REQUIRE(all_ranks(bitwise_equal(got, on_threads<TestType>(d, n))));
        }
}

TEST_CASE("mpi ring: reduce_scatter_sum owns the ring-order segment, all_gather completes it; traffic is 2 n (d-1)/d", "[mpi][ring]")
{
    communicator world = communicator::world();
    const int d = world.size(), r = world.rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(d + 1), std::size_t{4099}, std::size_t{300000}}) {
        CAPTURE(n);
        world.set_chunk_bytes(std::size_t{1} << 16);
        const auto expected = tpipe_test::ring_order_sum<float>(d, n);
        auto v = values_of<float>(r, n);
        const auto before = world.traffic();
        tpipe::sync_wait([](communicator& c, std::vector<float>& x) -> task<void> { co_await c.reduce_scatter_sum(std::span<float>(x)); }(world, v));
        const auto seg = tpipe::ring_segment(n, d, r);
        const bool own = seg.size == 0 || std::memcmp(v.data() + seg.begin, expected.data() + seg.begin, seg.size * sizeof(float)) == 0;
        REQUIRE(all_ranks(own));
        tpipe::sync_wait([](communicator& c, std::vector<float>& x) -> task<void> { co_await c.all_gather(std::span<float>(x)); }(world, v));
        REQUIRE(all_ranks(bitwise_equal(v, expected)));
        // Step t of the reduce-scatter sends segment r-t-1 and receives r-t-2; of the all-gather,
        // sends r-t and receives r-t-1: every segment but one, once, in each half.
        const auto after = world.traffic();
        const std::uint64_t sent = after.sent - before.sent, received = after.received - before.received;
        std::uint64_t want_sent = 0, want_received = 0;
        for (int t = 0; t < d - 1; ++t) {
            want_sent += tpipe::ring_segment(n, d, ((r - t - 1) % d + d) % d).size + tpipe::ring_segment(n, d, ((r - t) % d + d) % d).size;
            want_received += tpipe::ring_segment(n, d, ((r - t - 2) % d + d) % d).size + tpipe::ring_segment(n, d, ((r - t - 1) % d + d) % d).size;
        }
        CAPTURE(sent, received, want_sent, want_received);
        REQUIRE(all_ranks(sent == want_sent * sizeof(float) && received == want_received * sizeof(float)));
        // So 2 n (d - 1) / d, within one element per half (segments differ by at most one).
        const double ideal = 2.0 * static_cast<double>(n) * (d - 1) / d * sizeof(float);
        REQUIRE(all_ranks(std::abs(static_cast<double>(sent) - ideal) < 2.0 * sizeof(float)));
    }
}

TEST_CASE("mpi reduction_order::rank_order is the rank-order fold; native (MPI_Iallreduce) sums", "[mpi][ring]")
{
    communicator world = communicator::world();
    const int d = world.size();
    world.set_reduction_order(tpipe::reduction_order::rank_order);
    REQUIRE(all_ranks(bitwise_equal(all_reduce(world, values_of<double>(world.rank(), 5001)), tpipe_test::rank_order_sum<double>(d, 5001))));
    // A split communicator inherits the order.
    communicator copy = world.split(0, world.rank());
    REQUIRE(copy.order() == tpipe::reduction_order::rank_order);

    world.set_reduction_order(tpipe::reduction_order::native);
    // Integers sum exactly in any order; floats carry MPI's order (not asserted: MPI's bits).
    const auto native = all_reduce(world, values_of<std::int64_t>(world.rank(), 5001));
    REQUIRE(all_ranks(native == tpipe_test::rank_order_sum<std::int64_t>(d, 5001)));
    REQUIRE(all_ranks(all_reduce(world, values_of<std::int32_t>(world.rank(), 7)) == tpipe_test::rank_order_sum<std::int32_t>(d, 7)));
    const auto traffic = world.traffic();
    world.set_reduction_order(tpipe::reduction_order::ring);
    REQUIRE(all_ranks(bitwise_equal(all_reduce(world, values_of<float>(world.rank(), 5001)), tpipe_test::ring_order_sum<float>(d, 5001))));
    REQUIRE(all_ranks(world.traffic().sent > traffic.sent));
}
