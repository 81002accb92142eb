// tpipe::sharded_optimizer on threads: equals the replicated optimizer bitwise (ring all-reduce,
// elementwise AdamW), keeps 1/D of the state per member, refuses a buffer of another size.
#include <catch2/catch.hpp>

#include <exception>
#include <thread>
#include <vector>

#include "sharded_reference.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/sync_wait.hpp"

using tpipe_test::bitwise_equal;

TEST_CASE("sharded_optimizer on D = 1..5 threads equals the replicated AdamW bitwise, with 1/D of its state", "[comm][sharded]")
{
    for (int d = 1; d <= 5; ++d)
        for (std::size_t n : {std::size_t{0}, std::size_t{3}, std::size_t{1001}}) {
            CAPTURE(d, n);
            tpipe::thread_group g(d);
            std::vector<std::vector<float>> rep(static_cast<std::size_t>(d)), sh(static_cast<std::size_t>(d));
            std::vector<std::size_t> state(static_cast<std::size_t>(d));
            std::vector<std::exception_ptr> errors(static_cast<std::size_t>(d));
            std::vector<std::thread> threads;
            for (int i = 0; i < d; ++i)
                threads.emplace_back([&, i] {
                    const auto u = static_cast<std::size_t>(i);
                    try {
                        auto c = g.member(i);
                        tpipe::sync_wait(tpipe_test::replicated_and_sharded(c, n, 5, rep[u], sh[u], state[u]));
                    } catch (...) {
                        errors[u] = std::current_exception();
                    }
                });
            for (auto& t : threads) t.join();
            for (auto& e : errors)
                if (e) std::rethrow_exception(e);
            std::size_t total = 0;
            for (int i = 0; i < d; ++i) {
                const auto u = static_cast<std::size_t>(i);
                REQUIRE(bitwise_equal(sh[u], rep[u]));
                REQUIRE(bitwise_equal(sh[u], sh[0]));
                REQUIRE(state[u] == 2 * tpipe::ring_segment(n, d, i).size);  // m and v of the shard only
                total += state[u];
            }
            REQUIRE(total == 2 * n);
            if (n > 0 && d > 1) REQUIRE_FALSE(bitwise_equal(sh[0], tpipe_test::values_of<float>(-1, n)));  // it trained
        }
}

TEST_CASE("sharded_optimizer refuses buffers of another size than it was built for", "[comm][sharded]")
{
    tpipe::thread_group g(1);
    auto c = g.member(0);
    tpipe::sharded_optimizer<float, tpipe::thread_communicator> zero(c, 10);
    std::vector<float> p(10), grad(9);
    REQUIRE_THROWS_WITH(tpipe::sync_wait(zero.step(std::span<float>(p), std::span<float>(grad), [](std::span<float>, std::span<float>, std::size_t) {})),
                        Catch::Contains("grads has 9 elements, but the optimizer was built for 10"));
}
