// tpipe::every_member: one value from each member, in rank order, on every member.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "tpipe/comm/every_member.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/on_threads.hpp"
#include "tpipe/async/sync_wait.hpp"

TEST_CASE("every_member gives every member each member's value in rank order", "[comm]")
{
    for (int n : {1, 3, 5}) {
        CAPTURE(n);
        tpipe::thread_group g(n);
        std::vector<std::vector<std::int32_t>> ints(static_cast<std::size_t>(n));
        std::vector<std::vector<double>> reals(static_cast<std::size_t>(n));
        tpipe::on_threads(static_cast<std::size_t>(n), [&](std::size_t r) {
            auto me = g.member(static_cast<int>(r));
            ints[r] = tpipe::sync_wait(tpipe::every_member(me, static_cast<std::int32_t>(10 * r + 1)));
            reals[r] = tpipe::sync_wait(tpipe::every_member(me, 0.5 * static_cast<double>(r)));
        });
        for (int r = 0; r < n; ++r) {
            CHECK(ints[static_cast<std::size_t>(r)] == ints[0]);
            CHECK(reals[static_cast<std::size_t>(r)] == reals[0]);
            CHECK(ints[0][static_cast<std::size_t>(r)] == 10 * r + 1);
            CHECK(reals[0][static_cast<std::size_t>(r)] == 0.5 * r);
        }
    }
}
