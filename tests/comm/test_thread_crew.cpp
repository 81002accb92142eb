// tpipe::thread_crew: members run side by side on every call (they meet in a collective, which
// would hang if two shared a thread), on the same threads call after call, and a member's
// failure reaches the caller after the others have returned.
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tpipe/async/on_threads.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/async/thread_crew.hpp"
#include "tpipe/comm/thread_communicator.hpp"

namespace {
tpipe::task<void> sum(tpipe::thread_communicator& c, std::vector<float>& v) { co_await c.all_reduce_sum(std::span<float>(v)); }
} // namespace

TEST_CASE("thread_crew: members meet in collectives call after call, on threads started once", "[comm][crew]")
{
    for (std::size_t n : {1, 2, 3, 4}) {
        CAPTURE(n);
        tpipe::thread_crew crew(n);
        REQUIRE(crew.size() == n);
        tpipe::thread_group group(static_cast<int>(n));
        std::vector<tpipe::thread_communicator> members;
        for (std::size_t k = 0; k < n; ++k) members.push_back(group.member(static_cast<int>(k)));
        std::vector<std::thread::id> first(n);
        for (int call = 0; call < 50; ++call) {
            std::vector<float> got(n);
            crew.run([&](std::size_t k) {
                std::vector<float> v{static_cast<float>(k + call)};
                tpipe::sync_wait(sum(members[k], v));  // every member must be there
                got[k] = v[0];
                if (call == 0) first[k] = std::this_thread::get_id();
                else if (first[k] != std::this_thread::get_id()) throw std::logic_error("member moved to another thread");
            });
            const float expect = static_cast<float>(n * (n - 1) / 2 + n * static_cast<std::size_t>(call));
            for (float g : got) REQUIRE(g == expect);
        }
        REQUIRE(std::set<std::thread::id>(first.begin(), first.end()).size() == n);  // one thread each
        REQUIRE(first[0] == std::this_thread::get_id());                             // member 0 is the caller
    }
}

TEST_CASE("thread_crew: a failure is rethrown after every member returned; the crew runs again", "[comm][crew]")
{
    tpipe::thread_crew crew(3);
    std::atomic<int> returned{0};
    REQUIRE_THROWS_WITH(crew.run([&](std::size_t k) {
                            if (k == 2) throw std::runtime_error("member 2 failed");
                            std::this_thread::sleep_for(std::chrono::milliseconds(20));
                            ++returned;
                        }),
                        "member 2 failed");
    REQUIRE(returned == 2);
    crew.run([&](std::size_t) { ++returned; });
    REQUIRE(returned == 5);
    REQUIRE_THROWS_WITH(tpipe::thread_crew(0), Catch::Contains("needs at least 1 member"));
}

TEST_CASE("on_threads: the first failure cancels the members waiting for it and is the one rethrown", "[comm][crew]")
{
    // Member 2 fails; members 0 and 1 wait for it in a collective it never joins. Without the
    // cancel they would wait forever; with it they fail too, later, and the cause is rethrown.
    tpipe::thread_group group(3);
    std::vector<tpipe::thread_communicator> members;
    for (int k = 0; k < 3; ++k) members.push_back(group.member(k));
    std::atomic<int> cancels{0};
    try {
        tpipe::on_threads(
            3,
            [&](std::size_t k) {
                if (k == 2) throw std::runtime_error("member 2 failed");
                std::vector<float> v{1.0f};
                tpipe::sync_wait(sum(members[k], v));
            },
            [&] {
                ++cancels;
                group.cancel();
            });
        FAIL("on_threads returned although member 2 failed");
    } catch (const std::runtime_error& e) {
        CHECK(std::string(e.what()) == "member 2 failed");
    }
    CHECK(cancels.load() == 1);
}
