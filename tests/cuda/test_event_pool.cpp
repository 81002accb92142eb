// The event pool and after(): pooled events are reused (a steady state creates none), a
// completion resumes its coroutine on its loop once the work before it completed, errors and
// health checks name the work, cancellation ends a wait that would never end.
#include <catch2/catch.hpp>

#include <atomic>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fake_driver.hpp"
#include "tpipe/cuda/basic_after.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"

namespace {

using pool_t = tpipe::cuda::basic_event_pool<fake::driver>;
using after_t = tpipe::cuda::basic_after<fake::driver>;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

} // namespace

TEST_CASE("the event pool reuses its events per GPU: a steady state creates none", "[cuda][cpu][events]")
{
    fake::driver d(2);
    pool_t pool(d);
    auto a = pool.acquire(0), b = pool.acquire(1);
    CHECK(a->gpu == 0);
    CHECK(b->gpu == 1);
    pool.release(0, a);
    pool.release(1, b);
    CHECK(pool.created() == 2);
    for (int i = 0; i < 100; ++i) {
        auto e0 = pool.acquire(0), e1 = pool.acquire(1);
        CHECK(e0 == a);  // an event of the right GPU, from the pool
        CHECK(e1 == b);
        pool.release(0, e0);
        pool.release(1, e1);
    }
    CHECK(pool.created() == 2);
    CHECK(d.events_created() == 2);
    CHECK(pool.pooled() == 2);
    CHECK_THROWS_AS(pool.acquire(-1), tpipe::invalid_argument);
    CHECK_THROWS_AS(pool.acquire(2), tpipe::cuda::cuda_error);  // no such GPU: the driver refuses
    int gpu = -1;
    d.get_device(&gpu);
    CHECK(gpu == 0);  // the thread's GPU is restored after making an event elsewhere
}

TEST_CASE("after() resumes on its loop once the work before it completed, never before", "[cuda][cpu][after]")
{
    fake::driver d;
    pool_t pool(d);
    fake::stream_state* s = nullptr;
    d.stream_create(&s);
    tpipe::loop_thread lt;
    std::atomic<int> stage{0};
    std::atomic<bool> on_loop{false};
    auto body = [&]() -> tpipe::task<void> {
        co_await lt.get().schedule();
        d.launch(s);
        d.launch(s);
        stage = 1;
        co_await after_t(pool, d, s, 0, "rank 0 stage 0 F(unit 0)");
        on_loop = tpipe::loop::current() == &lt.get();
        stage = 2;
    };
    std::thread waiter([&] { tpipe::sync_wait(body()); });
    while (stage.load() < 1) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(stage.load() == 1);       // nothing completed: still waiting
    CHECK(d.complete(s, 2) == 2);   // the two kernels, not the event record
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    CHECK(stage.load() == 1);
    d.complete(s);                  // the record
    waiter.join();
    CHECK(stage.load() == 2);
    CHECK(on_loop.load());
    CHECK(pool.pooled() == 1);      // the event went back
}

TEST_CASE("after() on a failed stream throws cuda_error naming the work and the CUDA error", "[cuda][cpu][after]")
{
    fake::driver d;
    d.set_immediate(true);
    pool_t pool(d);
    fake::stream_state* s = nullptr;
    d.stream_create(&s);
    d.launch(s, fake::code::illegal_address);
    auto body = [&]() -> tpipe::task<void> { co_await after_t(pool, d, s, 0, "rank 1 stage 2 B(unit 3)"); };
    try {
        tpipe::sync_wait(body());
        FAIL("no error");
    } catch (const tpipe::cuda::cuda_error& e) {
        CAPTURE(e.what());
        CHECK(e.code() == fake::code::illegal_address);
        CHECK(e.call() == "cudaEventQuery");
        CHECK(contains(e.what(), "rank 1 stage 2 B(unit 3)"));
        CHECK(contains(e.what(), "cudaErrorIllegalAddress"));
        CHECK(contains(e.what(), "an illegal memory access was encountered"));
    }
    CHECK(pool.pooled() == 1);
}

TEST_CASE("a health check polled alongside the event ends the wait with its message", "[cuda][cpu][after]")
{
    fake::driver d;
    pool_t pool(d);
    fake::stream_state* s = nullptr;
    d.stream_create(&s);
    d.launch(s);  // never completed: only the check can end the wait
    int polls = 0;
    auto check = [&]() -> std::optional<std::string> {
        if (++polls < 10) return std::nullopt;
        return std::string("ncclCommGetAsyncError: remote process exited");
    };
    auto body = [&]() -> tpipe::task<void> {
        co_await tpipe::cuda::basic_after<fake::driver, decltype(check)>(pool, d, s, 0, "rank 0 SEND_F(unit 1)", check);
    };
    try {
        tpipe::sync_wait(body());
        FAIL("no error");
    } catch (const tpipe::cuda::cuda_error& e) {
        CHECK(e.code() == -1);
        CHECK(contains(e.what(), "rank 0 SEND_F(unit 1): ncclCommGetAsyncError: remote process exited"));
    }
    CHECK(polls == 10);
}

TEST_CASE("cancellation ends a wait for work that never completes", "[cuda][cpu][after]")
{
    fake::driver d;
    pool_t pool(d);
    fake::stream_state* s = nullptr;
    d.stream_create(&s);
    d.stall(s);
    d.launch(s);
    std::atomic<bool> cancelled{false};
    tpipe::loop_thread lt;
    std::atomic<bool> waiting{false};
    auto body = [&]() -> tpipe::task<void> {
        co_await lt.get().schedule();
        waiting = true;
        co_await after_t(pool, d, s, 0, "hung", {}, &cancelled);
    };
    std::thread t([&] { CHECK_THROWS_AS(tpipe::sync_wait(body()), tpipe::operation_cancelled); });
    while (!waiting.load()) std::this_thread::yield();
    cancelled = true;
    t.join();
    CHECK(pool.pooled() == 1);
}

TEST_CASE("after() completed by a device thread: one pooled event serves every wait", "[cuda][cpu][after]")
{
    fake::driver d;
    d.start_device();
    pool_t pool(d);
    fake::stream_state* s = nullptr;
    d.stream_create(&s);
    for (int i = 0; i < 50; ++i) {
        d.launch(s);
        auto body = [&]() -> tpipe::task<int> {
            co_await after_t(pool, d, s, 0, "plain");
            co_return 7;
        };
        CHECK(tpipe::sync_wait(body()) == 7);
        CHECK(d.queued(s) == 0);
    }
    CHECK(pool.created() == 1);
}
