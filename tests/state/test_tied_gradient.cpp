// tpipe::tied_gradient: the copies of a tied parameter end with the sum of every holder's
// gradient, added in holder order from +0, the same bits in one process and over members.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <exception>
#include <random>
#include <thread>
#include <vector>

#include "tpipe/async/sync_wait.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/state/tied_gradient.hpp"

namespace {

std::vector<float> random_gradient(std::size_t n, std::uint32_t seed)
{
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> g(n);
    for (auto& x : g) x = dist(rng) * 1e-3f;
    g[0] = -0.0f;  // a -0 on every holder: the sum is +0 on both paths
    g[1] = seed == 1 ? 1.0f : seed == 2 ? 1e8f : -1e8f;  // (1 + 1e8) - 1e8 = 0, but 1 + (1e8 - 1e8) = 1
    return g;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b)
{
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

//! The holders' gradients summed over `members` thread members: member m holds the holders
//! whose index is m modulo members. Returns every holder's copy afterwards.
std::vector<std::vector<float>> over_members(const std::vector<int>& holders, const std::vector<std::vector<float>>& grads,
                                             int members)
{
    std::vector<std::vector<float>> copies = grads;
    tpipe::thread_group group(members);
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(members));
    std::vector<std::thread> threads;
    for (int m = 0; m < members; ++m)
        threads.emplace_back([&, m] {
            try {
                tpipe::tied_gradient<float> tie(holders, grads[0].size());
                for (std::size_t h = static_cast<std::size_t>(m); h < holders.size(); h += static_cast<std::size_t>(members))
                    tie.hold(holders[h], copies[h]);
                tpipe::thread_communicator c = group.member(m);
                tpipe::sync_wait(tie.sum(c));
            } catch (...) {
                errors[static_cast<std::size_t>(m)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    return copies;
}

} // namespace

TEST_CASE("tied_gradient sums the holders' gradients in holder order, the same bits in one process and over members",
          "[state][tied]")
{
    const std::size_t n = 257;
    const std::vector<std::vector<int>> ties = {{0, 3}, {3, 0}, {0, 2, 5}};
    for (const auto& holders : ties) {
        CAPTURE(holders);
        std::vector<std::vector<float>> grads;
        for (std::size_t h = 0; h < holders.size(); ++h) grads.push_back(random_gradient(n, static_cast<std::uint32_t>(h + 1)));
        // The reference: from +0, the holders in the order given.
        std::vector<float> want(n, 0.0f);
        for (const auto& g : grads)
            for (std::size_t i = 0; i < n; ++i) want[i] += g[i];
        CHECK(!std::signbit(want[0]));

        std::vector<std::vector<float>> here = grads;
        tpipe::tied_gradient<float> tie(holders, n);
        for (std::size_t h = 0; h < holders.size(); ++h) tie.hold(holders[h], here[h]);
        tie.sum_here();
        for (const auto& c : here) CHECK(same_bits(c, want));

        for (int members = 1; members <= static_cast<int>(holders.size()) + 1; ++members) {
            CAPTURE(members);  // the last count leaves a member that holds nothing: it adds zeros
            for (const auto& c : over_members(holders, grads, members)) CHECK(same_bits(c, want));
        }
    }
}

TEST_CASE("tied_gradient refuses what is not a tie, and a sum in one process that misses a holder", "[state][tied]")
{
    REQUIRE_THROWS_WITH(tpipe::tied_gradient<float>({0}, 4), Catch::Contains("needs at least 2 holders, got 1"));
    REQUIRE_THROWS_WITH(tpipe::tied_gradient<float>({0, 0}, 4), Catch::Contains("stage 0 is listed twice"));
    REQUIRE_THROWS_WITH(tpipe::tied_gradient<float>({0, 1}, 0), Catch::Contains("0 elements"));
    tpipe::tied_gradient<float> tie({0, 3}, 4);
    std::vector<float> a(4), b(3);
    REQUIRE_THROWS_WITH(tie.hold(1, a), Catch::Contains("stage 1 is not a holder (0, 3)"));
    REQUIRE_THROWS_WITH(tie.hold(3, b), Catch::Contains("stage 3's gradient has 3 elements, the tied parameter 4"));
    tie.hold(0, a);
    REQUIRE_THROWS_WITH(tie.hold(0, a), Catch::Contains("stage 0 is held twice"));
    REQUIRE_THROWS_WITH(tie.sum_here(), Catch::Contains("stage(s) 3 hold a copy but not in this process"));
}
