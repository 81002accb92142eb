#include <catch2/catch.hpp>

#include <array>
#include <coroutine>
#include <cstddef>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "tpipe/async/any_awaiter.hpp"
#include "tpipe/exec/engine.hpp"
#include "tpipe/transport/linked_channel.hpp"
#include "tpipe/transport/local_channel.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/async/when_all.hpp"

namespace {

tpipe::task<void> send_all(tpipe::loop& on, tpipe::local_channel<std::unique_ptr<int>>& c, int n, int base)
{
    co_await on.schedule();
    for (int t = 0; t < n; ++t) c.send(t, std::make_unique<int>(base + t));
}

tpipe::task<std::vector<int>> recv_all(tpipe::loop& on, tpipe::local_channel<std::unique_ptr<int>>& c, int n)
{
    co_await on.schedule();
    std::vector<int> got;
    for (int t = n - 1; t >= 0; --t) got.push_back(*co_await c.recv(t));  // any order of tags
    co_return got;
}

} // namespace

TEST_CASE("a local channel moves payloads between loops, iteration after iteration", "[exec][channel]")
{
    tpipe::loop_thread a, b;
    tpipe::local_channel<std::unique_ptr<int>> c(64);
    for (int it = 0; it < 50; ++it) {
        if (it > 0) c.reset(64);  // drained: starts the next iteration without visiting the slots
        for (int t = 0; t < 64; ++t) CHECK_FALSE(c.ready(t));
        auto [done, got] = tpipe::sync_wait(tpipe::when_all(send_all(a.get(), c, 64, 1000 * it), recv_all(b.get(), c, 64)));
        (void)done;
        REQUIRE(got.size() == 64);
        for (int k = 0; k < 64; ++k) CHECK(got[k] == 1000 * it + 63 - k);
    }
}

TEST_CASE("a local channel refuses a tag sent twice or taken twice in one iteration", "[exec][channel]")
{
    tpipe::local_channel<int> c(2);
    c.send(0, 1);
    CHECK_THROWS_WITH(c.send(0, 2), Catch::Contains("sent twice"));
    CHECK(c.take(0) == 1);
    CHECK_THROWS_WITH(c.send(0, 3), Catch::Contains("sent twice"));  // taken counts as sent
    CHECK_THROWS_WITH(c.take(0), Catch::Contains("taken before it arrived or twice"));
    CHECK_THROWS_WITH(c.take(1), Catch::Contains("taken before it arrived or twice"));
    CHECK_THROWS_WITH(c.send(2, 0), Catch::Contains("outside [0, 2)"));
    c.reset(2);
    c.send(0, 4);  // a new iteration: the tag is free again
    CHECK(c.take(0) == 4);
}

TEST_CASE("an undelivered payload is destroyed when its slot is reused, or by clear()", "[exec][channel]")
{
    auto counted = std::make_shared<int>(7);
    tpipe::local_channel<std::shared_ptr<int>> c(3);
    c.send(0, std::shared_ptr<int>(counted));
    c.send(1, std::shared_ptr<int>(counted));
    (void)c.take(1);
    CHECK(counted.use_count() == 2);  // tag 0 still holds one
    c.reset(3);                       // O(1): the next iteration sees every tag empty
    CHECK_FALSE(c.ready(0));
    CHECK_THROWS_WITH(c.take(0), Catch::Contains("taken before it arrived"));
    c.send(0, std::make_shared<int>(8));  // replaces the stale payload
    CHECK(counted.use_count() == 1);
    CHECK(*c.take(0) == 8);
    c.send(2, std::shared_ptr<int>(counted));
    CHECK(counted.use_count() == 2);
    c.clear();
    CHECK(counted.use_count() == 1);
    CHECK_FALSE(c.ready(2));
}

TEST_CASE("the iteration's stop token wakes a receiver that waits on another loop", "[exec][channel]")
{
    tpipe::loop_thread a;
    tpipe::local_channel<int> c(1);
    std::stop_source stop;
    c.reset(1, stop.get_token());
    auto waiter = [&]() -> tpipe::task<bool> {
        co_await a.get().schedule();
        try {
            (void)co_await c.recv(0);
        } catch (const tpipe::operation_cancelled&) {
            co_return true;
        }
        co_return false;
    };
    auto canceller = [&]() -> tpipe::task<void> {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        stop.request_stop();
        co_return;
    };
    auto [cancelled, none] = tpipe::sync_wait(tpipe::when_all(waiter(), canceller()));
    (void)none;
    CHECK(cancelled);
    c.reset(1);  // usable again
    c.send(0, 5);
    CHECK(c.take(0) == 5);
}

//! Whether awaiting the arrival of tag 0 on `c` throws operation_cancelled (a payload is sent
//! first, so an arrival that is not cancelled completes at once).
template <class C>
bool arrival_cancelled(C& c)
{
    c.send(0, 7);
    auto await = [](C& ch) -> tpipe::task<bool> {
        try {
            co_await ch.arrival(0);
        } catch (const tpipe::operation_cancelled&) {
            co_return true;
        }
        co_return false;
    };
    return tpipe::sync_wait(await(c));
}

TEST_CASE("a channel hears only the token of its current iteration", "[exec][channel]")
{
    tpipe::local_channel<int> c(1);
    SECTION("a token stopped before the iteration starts cancels it at once")
    {
        std::stop_source stopped;
        stopped.request_stop();
        c.reset(1, stopped.get_token());
        CHECK(arrival_cancelled(c));
    }
    SECTION("the last iteration's token no longer cancels")
    {
        std::stop_source last, now;
        c.reset(1, last.get_token());
        c.reset(1, now.get_token());
        last.request_stop();
        CHECK_FALSE(arrival_cancelled(c));
        CHECK(c.take(0) == 7);
        c.reset(1, now.get_token());
        now.request_stop();
        CHECK(arrival_cancelled(c));
    }
}

TEST_CASE("a linked channel refuses a header of another size than its payload's, naming both sizes", "[exec][channel]")
{
    //! Announces tag 0 with a 3-byte header, as a sender of another payload type would.
    struct wrong_header_link final : tpipe::link {
        void send(int, std::span<const std::byte>, std::span<const std::byte>) override {}
        void post(int, std::span<std::byte>) override {}
        void poll(tpipe::link_events& events, bool) override
        {
            const std::array<std::byte, 3> header{};
            (void)events.place(0, header);
        }
        void reset(int) override {}
        std::string peer() const override { return "test, process 1"; }
    };
    tpipe::linked_channel<std::vector<float>> c(std::make_unique<wrong_header_link>(), tpipe::channel_end::receiver, 1);
    auto wait = [](tpipe::linked_channel<std::vector<float>>& ch) -> tpipe::task<void> { co_await ch.arrival(0); };
    CHECK_THROWS_WITH(tpipe::sync_wait(wait(c)), Catch::Contains("linked_channel (test, process 1): the payload header of tag 0 has 3 "
                                                                 "bytes, but this process expects 8 (the two ends disagree"));
}

namespace {
//! An awaiter bigger than any_awaiter's in-place room, counting its lives.
struct big_awaiter {
    std::array<std::byte, 4 * tpipe::detail::any_awaiter::capacity> room{};
    int* alive;
    explicit big_awaiter(int* a) : alive(a) { ++*alive; }
    big_awaiter(big_awaiter&& o) noexcept : alive(o.alive) { ++*alive; }
    ~big_awaiter() { --*alive; }
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<>) noexcept { return false; }  // resumes at once
    void await_resume() const noexcept {}
};
} // namespace

TEST_CASE("the runner's awaiter holder takes awaiters of any size: in place when they fit, else on the heap",
          "[exec][channel]")
{
    int alive = 0;
    {
        tpipe::detail::any_awaiter a;
        a.emplace<big_awaiter>(&alive);
        CHECK(alive == 1);
        auto wait = [](tpipe::detail::any_awaiter& w) -> tpipe::task<void> { co_await w; };
        tpipe::sync_wait(wait(a));
        a.emplace<std::suspend_never>();  // the big one is destroyed and freed
        CHECK(alive == 0);
        a.emplace<big_awaiter>(&alive);
    }
    CHECK(alive == 0);  // and when the holder goes
}

TEST_CASE("cpu_engine drives devices on at most one thread per device, in contiguous blocks", "[exec][engine]")
{
    tpipe::cpu_engine two(8, {.threads = 2});
    CHECK(two.devices() == 8);
    CHECK(two.threads() == 2);
    for (int d = 0; d < 8; ++d) CHECK(two.thread_of(d) == d / 4);
    CHECK(&two.loop_of(0) == &two.loop_of(3));
    CHECK(&two.loop_of(3) != &two.loop_of(4));
    CHECK_THROWS_AS(two.thread_of(8), tpipe::invalid_argument);

    tpipe::cpu_engine dflt(3);
    const unsigned hw = std::thread::hardware_concurrency();
    CHECK(dflt.threads() == (hw == 0 ? 3 : std::min(3, static_cast<int>(hw))));

    CHECK_THROWS_WITH(tpipe::cpu_engine(2, {.threads = 3}), Catch::Contains("threads must be in [1, 2]"));
    CHECK_THROWS_WITH(tpipe::cpu_engine(2, {.threads = -1}), Catch::Contains("got -1"));
    CHECK_THROWS_WITH(tpipe::cpu_engine(0), Catch::Contains("at least 1 device"));
}
