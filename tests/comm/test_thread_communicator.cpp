// tpipe::thread_communicator: collectives are bitwise identical on every member and equal the
// ring-order sum (tests/comm/test_ring_order.cpp checks the orders in depth); mismatches are refused; cancel releases waiters; split; p2p order.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "reduction_values.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/async/when_all.hpp"

using tpipe::task;
using tpipe::thread_communicator;
using tpipe::thread_group;

namespace {

//! Runs f(member) for every member of a fresh group of d, each on its own thread driving its
//! own loop (sync_wait); rethrows the first member's exception.
template <class F>
void on_threads(int d, F f)
{
    thread_group g(d);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(d));
    std::vector<std::thread> threads;
    for (int i = 0; i < d; ++i)
        threads.emplace_back([&, i] {
            thread_communicator c = g.member(i);
            try {
                tpipe::sync_wait(f(c));
            } catch (...) {
                errors[static_cast<std::size_t>(i)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

using tpipe_test::bitwise_equal;
using tpipe_test::ring_order_sum;
using tpipe_test::values_of;

std::span<std::byte> bytes_of(std::vector<int>& v) { return std::as_writable_bytes(std::span<int>(v)); }

} // namespace

TEST_CASE("thread_communicator models the communicator concept", "[comm][thread]")
{
    STATIC_REQUIRE(tpipe::communicator<thread_communicator>);
}

TEMPLATE_TEST_CASE("all_reduce_sum on 1..4 threads is the ring-order sum, bitwise identical on every member", "[comm][thread]",
                   float, double, std::int32_t, std::int64_t)
{
    constexpr std::size_t n = 1000;
    for (int d = 1; d <= 4; ++d) {
        CAPTURE(d);
        const auto expected = ring_order_sum<TestType>(d, n);
        std::vector<std::vector<TestType>> results(static_cast<std::size_t>(d));
        on_threads(d, [&](thread_communicator& c) -> task<void> {
            auto& mine = results[static_cast<std::size_t>(c.rank())];
            for (int iter = 0; iter < 20; ++iter) {  // repeated: slots and sequence numbers are reused
                mine = values_of<TestType>(c.rank(), n);
                co_await c.all_reduce_sum(std::span<TestType>(mine));
            }
        });
        for (int r = 0; r < d; ++r) REQUIRE(bitwise_equal(results[static_cast<std::size_t>(r)], expected));
    }
}

TEST_CASE("several all-reduces in flight at once from one member match by call order", "[comm][thread]")
{
    constexpr int d = 3;
    std::vector<std::vector<double>> a(d), b(d);
    on_threads(d, [&](thread_communicator& c) -> task<void> {
        const auto r = static_cast<std::size_t>(c.rank());
        a[r].assign(64, 1.0 + c.rank());
        b[r].assign(8, 10.0 * (1 + c.rank()));
        co_await tpipe::when_all(
            [](thread_communicator& cc, std::span<double> s) -> task<void> { co_await cc.all_reduce_sum(s); }(c, a[r]),
            [](thread_communicator& cc, std::span<double> s) -> task<void> { co_await cc.all_reduce_sum(s); }(c, b[r]));
    });
    for (int r = 0; r < d; ++r) {
        REQUIRE(a[static_cast<std::size_t>(r)] == std::vector<double>(64, 6.0));
        REQUIRE(b[static_cast<std::size_t>(r)] == std::vector<double>(8, 60.0));
    }
}

TEST_CASE("members on loop_threads resume on their own loop", "[comm][thread]")
{
    constexpr int d = 4;
    thread_group g(d);
    std::vector<std::unique_ptr<tpipe::loop_thread>> loops;
    for (int i = 0; i < d; ++i) loops.push_back(std::make_unique<tpipe::loop_thread>());
    std::atomic<int> wrong_loop{0};
    std::vector<std::thread> drivers;
    std::vector<std::vector<float>> results(d);
    for (int i = 0; i < d; ++i)
        drivers.emplace_back([&, i] {
            tpipe::sync_wait([](thread_communicator c, tpipe::loop& home, std::vector<float>& out, std::atomic<int>& wrong) -> task<void> {
                co_await home.schedule();
                for (int iter = 0; iter < 50; ++iter) {
                    out = values_of<float>(c.rank(), 257);
                    co_await c.all_reduce_sum(std::span<float>(out));
                    if (tpipe::loop::current() != &home) wrong.fetch_add(1);
                    co_await c.barrier();
                    if (tpipe::loop::current() != &home) wrong.fetch_add(1);
                }
            }(g.member(i), loops[static_cast<std::size_t>(i)]->get(), results[static_cast<std::size_t>(i)], wrong_loop));
        });
    for (auto& t : drivers) t.join();
    REQUIRE(wrong_loop.load() == 0);
    const auto expected = ring_order_sum<float>(d, 257);
    for (auto& r : results) REQUIRE(bitwise_equal(r, expected));
}

TEST_CASE("broadcast copies the root's bytes to every member; barrier waits for all", "[comm][thread]")
{
    for (int d = 1; d <= 4; ++d)
        for (int root = 0; root < d; ++root) {
            CAPTURE(d, root);
            std::vector<std::vector<int>> got(static_cast<std::size_t>(d));
            std::atomic<int> arrived{0};
            std::atomic<int> early{0};
            on_threads(d, [&](thread_communicator& c) -> task<void> {
                auto& v = got[static_cast<std::size_t>(c.rank())];
                v.assign(33, c.rank() == root ? 7 + root : -1);
                co_await c.broadcast(bytes_of(v), root);
                arrived.fetch_add(1);
                co_await c.barrier();
                if (arrived.load() != d) early.fetch_add(1);
            });
            REQUIRE(early.load() == 0);
            for (auto& v : got) REQUIRE(v == std::vector<int>(33, 7 + root));
        }
}

TEST_CASE("members calling different sizes or collectives get an error naming both", "[comm][thread]")
{
    std::vector<std::string> messages(2);
    on_threads(2, [&](thread_communicator& c) -> task<void> {
        std::vector<float> v(c.rank() == 0 ? 10 : 12, 1.0f);
        try {
            co_await c.all_reduce_sum(std::span<float>(v));
        } catch (const tpipe::error& e) {
            messages[static_cast<std::size_t>(c.rank())] = e.what();
        }
        // The group stays usable afterwards.
        std::vector<float> w(3, 1.0f);
        co_await c.all_reduce_sum(std::span<float>(w));
        if (w != std::vector<float>(3, 2.0f)) throw std::runtime_error("group unusable after a mismatch");
    });
    for (auto& m : messages) {
        CAPTURE(m);
        REQUIRE(m.find("member 0 called all_reduce_sum of 10 float") != std::string::npos);
        REQUIRE(m.find("member 1 called all_reduce_sum of 12 float") != std::string::npos);
    }

    std::vector<std::string> kinds(2);
    on_threads(2, [&](thread_communicator& c) -> task<void> {
        std::vector<double> v(4, 1.0);
        try {
            if (c.rank() == 0) co_await c.barrier();
            else co_await c.all_reduce_sum(std::span<double>(v));
        } catch (const tpipe::error& e) {
            kinds[static_cast<std::size_t>(c.rank())] = e.what();
        }
    });
    for (auto& m : kinds) REQUIRE(m.find("called barrier") != std::string::npos);
}

TEST_CASE("cancel wakes a waiting member with operation_cancelled; reset makes it usable again", "[comm][thread]")
{
    thread_group g(2);
    thread_communicator c0 = g.member(0);
    thread_communicator c1 = g.member(1);
    std::thread canceller([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        c0.cancel();
    });
    std::vector<float> v(5, 1.0f);
    // Member 1 never arrives: without cancel this would wait forever.
    REQUIRE_THROWS_AS(tpipe::sync_wait([](thread_communicator& c, std::vector<float>& x) -> task<void> {
        co_await c.all_reduce_sum(std::span<float>(x));
    }(c0, v)), tpipe::operation_cancelled);
    canceller.join();
    // Future operations of the cancelled member fail at once, receives and sends included.
    std::vector<int> buf(1);
    REQUIRE_THROWS_AS(tpipe::sync_wait([](thread_communicator& c, std::vector<int>& b) -> task<void> { co_await c.recv(1, 0, bytes_of(b)); }(c0, buf)),
                      tpipe::operation_cancelled);
    REQUIRE_THROWS_AS(tpipe::sync_wait([](thread_communicator& c) -> task<void> { co_await c.barrier(); }(c0)), tpipe::operation_cancelled);
    // A pending receive is released too.
    c1.cancel();
    c0.reset();
    c1.reset();
    std::thread canceller2([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        c1.cancel();
    });
    REQUIRE_THROWS_AS(tpipe::sync_wait([](thread_communicator& c, std::vector<int>& b) -> task<void> { co_await c.recv(0, 3, bytes_of(b)); }(c1, buf)),
                      tpipe::operation_cancelled);
    canceller2.join();
    c1.reset();
    // After reset, both members work together again from sequence number 0.
    std::vector<std::vector<float>> out(2, std::vector<float>(5, 1.0f));
    std::thread t1([&] { tpipe::sync_wait([](thread_communicator& c, std::vector<float>& x) -> task<void> { co_await c.all_reduce_sum(std::span<float>(x)); }(c1, out[1])); });
    tpipe::sync_wait([](thread_communicator& c, std::vector<float>& x) -> task<void> { co_await c.all_reduce_sum(std::span<float>(x)); }(c0, out[0]));
    t1.join();
    REQUIRE(out[0] == std::vector<float>(5, 2.0f));
    REQUIRE(out[1] == std::vector<float>(5, 2.0f));
}

TEST_CASE("a group cancellation made in an iteration survives the reset of a member that starts it late", "[comm][thread]")
{
    thread_group g(2);
    thread_communicator c0 = g.member(0);
    thread_communicator c1 = g.member(1);
    auto reduce = [](thread_communicator& c) {
        std::vector<float> x(3, 1.0f);
        tpipe::sync_wait([](thread_communicator& m, std::vector<float>& v) -> task<void> { co_await m.all_reduce_sum(std::span<float>(v)); }(c, x));
        return x;
    };
    // Iteration 1: member 1 starts it, fails and cancels the group before member 0 has reset.
    c1.reset();
    c1.cancel_group();
    c0.reset();  // member 0 starts iteration 1 only now: it must still see the cancellation
    REQUIRE_THROWS_AS(reduce(c0), tpipe::operation_cancelled);
    // Iteration 2: both reset, and the group works again.
    c0.reset();
    c1.reset();
    std::vector<float> r1;
    std::thread t1([&] { r1 = reduce(c1); });
    const std::vector<float> r0 = reduce(c0);
    t1.join();
    REQUIRE(r0 == std::vector<float>(3, 2.0f));
    REQUIRE(r1 == r0);
}

TEST_CASE("a member cancelled inside a collective releases the members already waiting in it", "[comm][thread]")
{
    thread_group g(3);
    std::atomic<int> cancelled{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i)  // members 0 and 1 arrive; member 2 never does
        threads.emplace_back([&, i] {
            try {
                tpipe::sync_wait([](thread_communicator c) -> task<void> { co_await c.barrier(); }(g.member(i)));
            } catch (const tpipe::operation_cancelled&) {
                cancelled.fetch_add(1);
            }
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g.member(0).cancel();  // member 0 fails: member 1 must not wait forever
    for (auto& t : threads) t.join();
    REQUIRE(cancelled.load() == 2);
}

TEST_CASE("thread_group::cancel releases every member", "[comm][thread]")
{
    thread_group g(3);
    std::atomic<int> cancelled{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 3; ++i)
        threads.emplace_back([&, i] {
            std::vector<int> b(2);
            try {
                tpipe::sync_wait([](thread_communicator c, std::vector<int>& x) -> task<void> {
                    co_await c.recv((c.rank() + 1) % 3, 9, bytes_of(x));  // nobody sends
                }(g.member(i), b));
            } catch (const tpipe::operation_cancelled&) {
                cancelled.fetch_add(1);
            }
        });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    g.cancel();
    for (auto& t : threads) t.join();
    REQUIRE(cancelled.load() == 3);
}

TEST_CASE("split forms sub-groups by color, ranked by key", "[comm][thread]")
{
    constexpr int d = 4;
    std::vector<int> new_rank(d), new_size(d);
    std::vector<std::vector<double>> sums(d);
    on_threads(d, [&](thread_communicator& c) -> task<void> {
        // Even and odd members; the key reverses the order inside each sub-group.
        thread_communicator sub = c.split(c.rank() % 2, -c.rank());
        const auto r = static_cast<std::size_t>(c.rank());
        new_rank[r] = sub.rank();
        new_size[r] = sub.size();
        sums[r].assign(3, static_cast<double>(c.rank()));
        co_await sub.all_reduce_sum(std::span<double>(sums[r]));
        // A split of a split, and colors that leave one member alone.
        thread_communicator solo = sub.split(sub.rank(), 0);
        if (solo.size() != 1 || solo.rank() != 0) throw std::runtime_error("solo split");
        co_await solo.barrier();
    });
    REQUIRE(new_size == std::vector<int>{2, 2, 2, 2});
    REQUIRE(new_rank == std::vector<int>{1, 1, 0, 0});
    REQUIRE(sums[0] == std::vector<double>(3, 2.0));  // 0 + 2
    REQUIRE(sums[2] == std::vector<double>(3, 2.0));
    REQUIRE(sums[1] == std::vector<double>(3, 4.0));  // 1 + 3
    REQUIRE(sums[3] == std::vector<double>(3, 4.0));

    // A negative color is refused on every member (none is left waiting).
    std::atomic<int> refused{0};
    on_threads(2, [&](thread_communicator& c) -> task<void> {
        try {
            (void)c.split(c.rank() == 1 ? -1 : 0, 0);
        } catch (const tpipe::invalid_argument& e) {
            if (std::string(e.what()).find("member 1 passed color -1") != std::string::npos) refused.fetch_add(1);
        }
        co_return;
    });
    REQUIRE(refused.load() == 2);
}

TEST_CASE("point-to-point messages match by (source, tag) in FIFO order", "[comm][thread]")
{
    constexpr int n = 200;
    std::vector<int> got7, got8;
    on_threads(2, [&](thread_communicator& c) -> task<void> {
        if (c.rank() == 0) {
            for (int i = 0; i < n; ++i) {
                std::vector<int> v{i};
                co_await c.send(1, i % 2 ? 7 : 8, std::as_bytes(std::span<int>(v)));  // v may die at once: eager
            }
        } else {
            std::vector<int> v(1);
            // All of tag 7 first (they queue in the mailbox), then tag 8.
            for (int i = 0; i < n / 2; ++i) {
                co_await c.recv(0, 7, bytes_of(v));
                got7.push_back(v[0]);
            }
            for (int i = 0; i < n / 2; ++i) {
                co_await c.recv(0, 8, bytes_of(v));
                got8.push_back(v[0]);
            }
        }
    });
    for (int i = 0; i < n / 2; ++i) {
        REQUIRE(got7[static_cast<std::size_t>(i)] == 2 * i + 1);
        REQUIRE(got8[static_cast<std::size_t>(i)] == 2 * i);
    }
}

TEST_CASE("a receive waiting before the send is completed by the sender; a size mismatch is refused", "[comm][thread]")
{
    std::string mismatch;
    std::vector<int> got;
    on_threads(2, [&](thread_communicator& c) -> task<void> {
        if (c.rank() == 1) {
            std::vector<int> v(4);
            for (int i = 0; i < 100; ++i) {  // ping-pong: each receive usually waits
                co_await c.recv(0, 1, bytes_of(v));
                got.push_back(v[3]);
                co_await c.send(0, 2, std::as_bytes(std::span<int>(v)));
            }
            std::vector<int> small(2);
            try {
                co_await c.recv(0, 5, bytes_of(small));
            } catch (const tpipe::error& e) {
                mismatch = e.what();
            }
        } else {
            std::vector<int> v(4);
            for (int i = 0; i < 100; ++i) {
                v[3] = i;
                co_await c.send(1, 1, std::as_bytes(std::span<int>(v)));
                co_await c.recv(1, 2, bytes_of(v));
            }
            co_await c.send(1, 5, std::as_bytes(std::span<int>(v)));
        }
    });
    REQUIRE(got.size() == 100);
    for (int i = 0; i < 100; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == i);
    CAPTURE(mismatch);
    REQUIRE(mismatch.find("receives 8 bytes from member 0 with tag 5, but the message has 16 bytes") != std::string::npos);
}

TEST_CASE("bad peers, tags, roots and group sizes are refused", "[comm][thread]")
{
    REQUIRE_THROWS_AS(thread_group(0), tpipe::invalid_argument);
    thread_group g(2);
    REQUIRE_THROWS_AS(g.member(2), tpipe::invalid_argument);
    auto c = g.member(0);
    std::vector<std::byte> b(4);
    REQUIRE_THROWS_AS((void)c.send(2, 0, b), tpipe::invalid_argument);
    REQUIRE_THROWS_AS((void)c.recv(-1, 0, b), tpipe::invalid_argument);
    REQUIRE_THROWS_AS((void)c.send(1, -3, b), tpipe::invalid_argument);
    REQUIRE_THROWS_AS((void)c.broadcast(b, 5), tpipe::invalid_argument);
}

TEST_CASE("awaited on a plain thread (no loop), an operation blocks that thread", "[comm][thread]")
{
    thread_group g(2);
    std::vector<std::vector<float>> v(2, std::vector<float>(3, 1.5f));
    auto body = [](thread_communicator c, std::vector<float>& x) -> task<void> { co_await c.all_reduce_sum(std::span<float>(x)); };
    std::thread other([&] { tpipe::sync_wait(body(g.member(1), v[1])); });
    task<void> t = body(g.member(0), v[0]);
    t.handle().resume();  // runs on this thread, which drives no loop
    REQUIRE(t.done());
    other.join();
    t.result();
    REQUIRE(v[0] == std::vector<float>(3, 3.0f));
    REQUIRE(v[1] == std::vector<float>(3, 3.0f));
}
