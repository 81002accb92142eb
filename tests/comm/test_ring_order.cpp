// The ring order (tpipe/comm/reduction_order.hpp) and thread_communicator's implementation of
// it: segments, the documented fold computed sequentially (written out independently in
// reduction_values.hpp), reduce_scatter_sum / all_gather, and the rank-order option.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "reduction_values.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"

using tpipe::task;
using tpipe::thread_communicator;
using tpipe_test::bitwise_equal;
using tpipe_test::values_of;

namespace {

template <class F>
void on_threads(int d, F f)
{
    tpipe::thread_group g(d);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(d));
    std::vector<std::thread> threads;
    for (int i = 0; i < d; ++i)
        threads.emplace_back([&, i] {
            try {
                tpipe::sync_wait(f(g.member(i)));
            } catch (...) {
                errors[static_cast<std::size_t>(i)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

std::vector<std::size_t> sizes_for(int d)
{
    return {0, 1, static_cast<std::size_t>(d) - 1, static_cast<std::size_t>(d) + 1, 7, 1000, 1001};
}

} // namespace

TEST_CASE("ring_segment cuts n elements into d contiguous balanced segments", "[comm][ring]")
{
    for (int d = 1; d <= 8; ++d)
        for (std::size_t n = 0; n <= 40; ++n) {
            CAPTURE(d, n);
            std::size_t next = 0;
            for (int s = 0; s < d; ++s) {
                const auto seg = tpipe::ring_segment(n, d, s);
                REQUIRE(seg.begin == next);
                REQUIRE((seg.size == n / d || seg.size == n / d + 1));
                REQUIRE((seg.size == n / d + 1) == (static_cast<std::size_t>(s) < n % d));
                next += seg.size;
            }
            REQUIRE(next == n);
        }
    CHECK(tpipe::ring_segment(10, 4, 0) == tpipe::element_range{0, 3});
    CHECK(tpipe::ring_segment(10, 4, 3) == tpipe::element_range{8, 2});
}

TEST_CASE("the ring order adds members s+1, ..., s for segment s: a case where it differs from the rank order", "[comm][ring]")
{
    // d = 3, one element per segment. Rank order: (a0 + a1) + a2 everywhere.
    const float x0[3] = {1e8f, 1e8f, 1e8f}, x1[3] = {1.0f, 1.0f, 1.0f}, x2[3] = {-1e8f, -1e8f, -1e8f};
    const float* in[3] = {x0, x1, x2};
    float out[3];
    tpipe::ring_order_sum<float>(std::span<const float* const>(in, 3), std::span<float>(out, 3));
    CHECK(out[0] == (1.0f + -1e8f) + 1e8f);  // segment 0: (x1 + x2) + x0 = 0
    CHECK(out[1] == (-1e8f + 1e8f) + 1.0f);  // segment 1: (x2 + x0) + x1 = 1
    CHECK(out[2] == (1e8f + 1.0f) + -1e8f);  // segment 2: (x0 + x1) + x2 = 0
    CHECK(out[0] == 0.0f);
    CHECK(out[1] == 1.0f);
    CHECK(tpipe::ring_addend(2, 3, 0) == 0);
    CHECK(tpipe::ring_addend(0, 3, 2) == 0);
}

TEMPLATE_TEST_CASE("threads: all_reduce_sum is the ring order computed sequentially, D = 1..8, bitwise on every member", "[comm][ring]",
                   float, double, std::int32_t, std::int64_t)
{
    for (int d = 1; d <= 8; ++d)
        for (std::size_t n : sizes_for(d)) {
            CAPTURE(d, n);
            const auto expected = tpipe_test::ring_order_sum<TestType>(d, n);
            std::vector<std::vector<TestType>> got(static_cast<std::size_t>(d));
            on_threads(d, [&](thread_communicator c) -> task<void> {
                auto& mine = got[static_cast<std::size_t>(c.rank())];
                mine = values_of<TestType>(c.rank(), n);
                co_await c.all_reduce_sum(std::span<TestType>(mine));
            });
            for (auto& g : got) REQUIRE(bitwise_equal(g, expected));
        }
}

TEST_CASE("threads: the ring order differs from the rank order for d >= 3 on these values, and equals it for d = 2", "[comm][ring]")
{
    CHECK(bitwise_equal(tpipe_test::ring_order_sum<float>(2, 1000), tpipe_test::rank_order_sum<float>(2, 1000)));
    CHECK_FALSE(bitwise_equal(tpipe_test::ring_order_sum<float>(3, 1000), tpipe_test::rank_order_sum<float>(3, 1000)));
}

TEST_CASE("threads: reduction_order::rank_order keeps the rank-order fold; native is refused; members must agree", "[comm][ring]")
{
    for (int d : {3, 5}) {
        const auto expected = tpipe_test::rank_order_sum<double>(d, 333);
        std::vector<std::vector<double>> got(static_cast<std::size_t>(d));
        on_threads(d, [&](thread_communicator c) -> task<void> {
            c.set_reduction_order(tpipe::reduction_order::rank_order);
            auto& mine = got[static_cast<std::size_t>(c.rank())];
            mine = values_of<double>(c.rank(), 333);
            co_await c.all_reduce_sum(std::span<double>(mine));
        });
        for (auto& g : got) REQUIRE(bitwise_equal(g, expected));
    }
    tpipe::thread_group g(1);
    auto c = g.member(0);
    REQUIRE_THROWS_WITH(c.set_reduction_order(tpipe::reduction_order::native), Catch::Contains("no native all-reduce"));

    std::vector<std::string> messages(2);
    on_threads(2, [&](thread_communicator m) -> task<void> {
        if (m.rank() == 1) m.set_reduction_order(tpipe::reduction_order::rank_order);
        std::vector<float> v(4, 1.0f);
        try {
            co_await m.all_reduce_sum(std::span<float>(v));
        } catch (const tpipe::error& e) {
            messages[static_cast<std::size_t>(m.rank())] = e.what();
        }
    });
    for (auto& m : messages) {
        CAPTURE(m);
        REQUIRE(m.find("member 0 called all_reduce_sum of 4 float (ring order)") != std::string::npos);
        REQUIRE(m.find("member 1 called all_reduce_sum of 4 float (rank_order order)") != std::string::npos);
    }
}

TEMPLATE_TEST_CASE("threads: reduce_scatter_sum fills the own segment with the ring-order sum; all_gather completes it", "[comm][ring]",
                   float, std::int64_t)
{
    for (int d = 1; d <= 8; ++d)
        for (std::size_t n : sizes_for(d)) {
            CAPTURE(d, n);
            const auto expected = tpipe_test::ring_order_sum<TestType>(d, n);
            std::vector<std::vector<TestType>> scattered(static_cast<std::size_t>(d)), gathered(static_cast<std::size_t>(d));
            on_threads(d, [&](thread_communicator c) -> task<void> {
                auto v = values_of<TestType>(c.rank(), n);
                co_await c.reduce_scatter_sum(std::span<TestType>(v));
                scattered[static_cast<std::size_t>(c.rank())] = v;
                co_await c.all_gather(std::span<TestType>(v));
                gathered[static_cast<std::size_t>(c.rank())] = v;
            });
            for (int r = 0; r < d; ++r) {
                const auto seg = tpipe::ring_segment(n, d, r);
                const auto& mine = scattered[static_cast<std::size_t>(r)];
                REQUIRE((seg.size == 0 || std::memcmp(mine.data() + seg.begin, expected.data() + seg.begin, seg.size * sizeof(TestType)) == 0));
                REQUIRE(bitwise_equal(gathered[static_cast<std::size_t>(r)], expected));
            }
        }
}
