#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "members.hpp"
#include "thread_control.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"

using tpipe::nccl::fake::communicator;
using tpipe::nccl::fake::members;
using tpipe::nccl::fake::on_threads;

namespace {
template <class F>
void run(F&& f)
{
    tpipe::sync_wait([&]() -> tpipe::task<void> { co_await f(); }());
}
bool no_errors(const std::vector<std::string>& e)
{
    for (const auto& s : e)
        if (!s.empty()) {
            UNSCOPED_INFO(s);
            return false;
        }
    return true;
}
} // namespace

static_assert(tpipe::communicator<communicator>);

TEST_CASE("nccl communicator: all_reduce_sum gives every member the same bits, NCCL's order, not the rank-order fold",
          "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    const int n = 3;
    auto comms = members(w, n);
    const std::vector<std::vector<float>> in = {{1e8f, 1.0f, 2.0f}, {1.0f, 3.0f, -1.0f}, {-1e8f, 5.0f, 0.5f}};
    std::vector<std::vector<float>> out = in;
    std::vector<std::vector<std::int64_t>> ints(n, std::vector<std::int64_t>{7, -3});
    auto errors = on_threads(n, [&](int r) {
        run([&]() -> tpipe::task<void> {
            co_await comms[r].all_reduce_sum(std::span<float>(out[r]));
            co_await comms[r].all_reduce_sum(std::span<std::int64_t>(ints[r]));
        });
    });
    REQUIRE(no_errors(errors));
    for (int r = 0; r < n; ++r) {
        CHECK(out[r] == out[0]);  // bitwise identical on every member
        CHECK(ints[r] == std::vector<std::int64_t>{21, -9});
    }
    CHECK(out[0][1] == 9.0f);
    // A case where the fake's order (like NCCL's) differs from the rank-order fold:
    tpipe::nccl::fake::world w2;
    auto c2 = members(w2, 3);
    std::vector<std::vector<float>> v = {{1.0f}, {1e8f}, {-1e8f}};
    REQUIRE(no_errors(on_threads(3, [&](int r) { run([&]() -> tpipe::task<void> { co_await c2[r].all_reduce_sum(std::span<float>(v[r])); }); })));
    CHECK(v[0][0] == v[1][0]);
    CHECK(v[0][0] == v[2][0]);
    CHECK(v[0][0] == 1.0f);                          // (-1e8 + 1e8) + 1
    CHECK((1.0f + 1e8f) + -1e8f == 0.0f);             // the rank-order fold would give 0
}

TEST_CASE("nccl communicator: two members' all-reduce equals the rank-order fold", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    auto comms = members(w, 2);
    std::vector<std::vector<double>> v = {{0.1, 1e16}, {0.2, 1.0}};
    const std::vector<double> fold = {0.1 + 0.2, 1e16 + 1.0};
    REQUIRE(no_errors(on_threads(2, [&](int r) { run([&]() -> tpipe::task<void> { co_await comms[r].all_reduce_sum(std::span<double>(v[r])); }); })));
    CHECK(v[0] == fold);
    CHECK(v[1] == fold);
}

TEST_CASE("nccl communicator: broadcast, barrier and grouped point-to-point", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    const int n = 3;
    auto comms = members(w, n);
    std::vector<std::vector<std::byte>> b(n, std::vector<std::byte>(5));
    for (int i = 0; i < 5; ++i) b[1][i] = std::byte(i + 10);
    std::vector<std::vector<std::byte>> got(n, std::vector<std::byte>(3));
    std::vector<std::vector<std::byte>> mine(n);
    for (int r = 0; r < n; ++r) mine[r] = {std::byte(r), std::byte(r + 1), std::byte(r + 2)};
    auto errors = on_threads(n, [&](int r) {
        run([&]() -> tpipe::task<void> {
            co_await comms[r].broadcast(b[r], 1);
            co_await comms[r].barrier();
            // A ring: everybody receives from the left first, except rank 0, which sends first.
            const int right = (r + 1) % n, left = (r + n - 1) % n;
            if (r == 0) {
                co_await comms[r].send(right, 0, mine[r]);
                co_await comms[r].recv(left, 0, got[r]);
            } else {
                co_await comms[r].recv(left, 0, got[r]);
                co_await comms[r].send(right, 0, mine[r]);
            }
        });
    });
    REQUIRE(no_errors(errors));
    for (int r = 0; r < n; ++r) {
        CHECK(b[r] == b[1]);
        CHECK(got[r] == mine[(r + n - 1) % n]);
    }
}

TEST_CASE("nccl communicator: two members that both send first deadlock, and the report names both sides",
          "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    w.stall_timeout = std::chrono::milliseconds(100);
    auto comms = members(w, 2);
    std::vector<std::vector<std::byte>> out(2, std::vector<std::byte>(4)), in(2, std::vector<std::byte>(4));
    auto errors = on_threads(2, [&](int r) {
        run([&]() -> tpipe::task<void> {
            auto s = comms[r].send(1 - r, 0, out[r]);  // each its own launch: blocks the stream
            auto v = comms[r].recv(1 - r, 0, in[r]);
            co_await s;
            co_await v;
        });
    });
    for (int r = 0; r < 2; ++r) {
        CHECK_THAT(errors[r], Catch::Contains("deadlock"));
        CHECK_THAT(errors[r], Catch::Contains("rank 0 sends 4 bytes to rank 1"));
        CHECK_THAT(errors[r], Catch::Contains("rank 1 sends 4 bytes to rank 0"));
        CHECK(comms[r].aborted());
        CHECK_THROWS_WITH(comms[r].reset(), Catch::Contains("bootstrap a new one"));
    }
}

TEST_CASE("nccl communicator: a receive of another size than the send is reported, naming both sides", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    auto comms = members(w, 2);
    std::vector<std::byte> a(8), b(16);
    auto errors = on_threads(2, [&](int r) {
        run([&]() -> tpipe::task<void> {
            if (r == 0) co_await comms[0].send(1, 3, a);
            else co_await comms[1].recv(0, 3, b);
        });
    });
    for (int r = 0; r < 2; ++r) {
        CHECK_THAT(errors[r], Catch::Contains("rank 0 sends 8 bytes to rank 1 (its 1st send to it)"));
        CHECK_THAT(errors[r], Catch::Contains("rank 1 receives 16 bytes from rank 0 (its 1st receive from it)"));
    }
}

TEST_CASE("nccl communicator: collectives that differ across members are reported", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    auto comms = members(w, 2);
    std::vector<std::vector<float>> v = {std::vector<float>(4), std::vector<float>(5)};
    auto errors = on_threads(2, [&](int r) { run([&]() -> tpipe::task<void> { co_await comms[r].all_reduce_sum(std::span<float>(v[r])); }); });
    for (int r = 0; r < 2; ++r) {
        CHECK_THAT(errors[r], Catch::Contains("collective mismatch"));
        CHECK_THAT(errors[r], Catch::Contains("all-reduces 4 float"));
        CHECK_THAT(errors[r], Catch::Contains("all-reduces 5 float"));
    }
}

TEST_CASE("nccl communicator: cancellation (cancel() or the iteration's stop token) with work in flight aborts and "
          "throws operation_cancelled; without, reset() clears it",
          "[nccl][communicator]")
{
    for (bool by_token : {false, true}) {
        CAPTURE(by_token);
        tpipe::nccl::fake::world w;
        w.stall_timeout = std::chrono::hours(1);
        auto comms = members(w, 2);
        std::stop_source stops[2];
        if (by_token)
            for (int r = 0; r < 2; ++r) comms[r].reset(stops[r].get_token());
        auto cancel = [&](int r) {
            if (by_token) stops[r].request_stop();
            else comms[r].cancel();
        };
        std::vector<std::byte> buf(4);
        std::atomic<bool> waiting{false};
        std::string error;
        std::thread t([&] {
            try {
                run([&]() -> tpipe::task<void> {
                    auto r = comms[0].recv(1, 0, buf);  // rank 1 never sends
                    waiting = true;
                    co_await r;
                });
            } catch (const tpipe::operation_cancelled&) {
                error = "cancelled";
            } catch (const std::exception& e) {
                error = e.what();
            }
        });
        while (!waiting) std::this_thread::yield();
        cancel(0);
        t.join();
        CHECK(error == "cancelled");
        CHECK(comms[0].aborted());
        CHECK(w.aborts == 1);
        CHECK_THROWS_WITH(comms[0].reset(), Catch::Contains("aborted"));

        cancel(1);  // nothing in flight: nothing to abort
        CHECK_THROWS_AS(comms[1].barrier(), tpipe::operation_cancelled);
        CHECK(!comms[1].aborted());
        comms[1].reset();
        CHECK(w.aborts == 1);
    }
}

TEST_CASE("nccl communicator: the watchdog aborts an operation that never completes", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    w.stall_timeout = std::chrono::hours(1);
    auto comms = members(w, 2, {.timeout = std::chrono::milliseconds(50)});
    std::vector<std::byte> buf(4);
    CHECK_THROWS_WITH(run([&]() -> tpipe::task<void> { co_await comms[0].recv(1, 0, buf); }),
                      Catch::Contains("rank 0 of 2: recv of 4 bytes from rank 1 (tag 0) did not complete within"));
    CHECK(comms[0].aborted());
}

TEST_CASE("nccl communicator: split groups members by color, ranked by key", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    const int n = 4;
    auto comms = members(w, n);
    std::vector<communicator> sub;
    sub.reserve(n);
    std::vector<int> rank(n), size(n);
    std::vector<std::vector<std::int32_t>> v(n);
    std::mutex m;
    std::vector<communicator*> by_rank(n);
    std::vector<std::unique_ptr<communicator>> subs(n);
    auto errors = on_threads(n, [&](int r) {
        subs[r] = std::make_unique<communicator>(comms[r].split(r % 2, -r));  // key -r: reversed order
        rank[r] = subs[r]->rank();
        size[r] = subs[r]->size();
        v[r] = {r};
        run([&]() -> tpipe::task<void> { co_await subs[r]->all_reduce_sum(std::span<std::int32_t>(v[r])); });
    });
    REQUIRE(no_errors(errors));
    CHECK(rank == std::vector<int>{1, 1, 0, 0});
    CHECK(size == std::vector<int>{2, 2, 2, 2});
    CHECK(v == std::vector<std::vector<std::int32_t>>{{2}, {4}, {2}, {4}});
    CHECK_THROWS_AS(comms[0].split(-1, 0), tpipe::invalid_argument);
}

TEST_CASE("nccl communicator: bad arguments are refused with what would be right", "[nccl][communicator]")
{
    tpipe::nccl::fake::world w;
    auto comms = members(w, 2);
    std::vector<std::byte> b(1);
    CHECK_THROWS_WITH(comms[0].send(2, 0, b), Catch::Contains("members are 0..1"));
    CHECK_THROWS_WITH(comms[0].send(0, 0, b), Catch::Contains("itself"));
    CHECK_THROWS_WITH(comms[0].recv(1, -1, b), Catch::Contains("tags are >= 0"));
    CHECK_THROWS_WITH(comms[0].broadcast(b, 5), Catch::Contains("broadcast root 5 is not a member"));
}

TEST_CASE("nccl communicator: init under a set-up bound runs ncclCommInitRank there, on the caller's GPU", "[nccl][communicator]")
{
    tpipe::nccl::fake::thread_bound bound;
    static_assert(tpipe::nccl::bounds_setup<tpipe::nccl::fake::thread_bound>);
    const int n = 3;
    tpipe::nccl::fake::world w(n);  // a GPU per member
    tpipe::nccl::fake::api a{&w};
    tpipe::nccl::unique_id id;
    REQUIRE(a.get_unique_id(id) == 0);
    std::vector<int> gpus(n, -1), sums(n);
    auto errors = on_threads(n, [&](int r) {
        if (w.device().set_device(r) != 0) throw std::runtime_error("no fake GPU " + std::to_string(r));
        auto c = communicator::init(a, n, id, r, bound);
        gpus[static_cast<std::size_t>(r)] = c.native()->gpu;
        std::vector<std::int32_t> v{r + 1};
        tpipe::sync_wait([&]() -> tpipe::task<void> { co_await c.all_reduce_sum(std::span<std::int32_t>(v)); }());
        sums[static_cast<std::size_t>(r)] = v[0];
    });
    for (const auto& e : errors) CHECK(e.empty());
    CHECK(bound.calls == std::vector<std::string>(n, "tpipe::nccl::communicator::init: ncclCommInitRank"));
    CHECK(gpus == std::vector<int>{0, 1, 2});  // made on the bound's threads, bound to each caller's GPU
    CHECK(sums == std::vector<int>{6, 6, 6});
}
