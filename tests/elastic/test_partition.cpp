// The partitioner is optimal: its slowest stage equals the brute-force minimum over every
// placement of the cuts, with the frozen prefix on stage 0 weighted by lambda; it never leaves
// a stage empty and refuses shapes it cannot fill.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tpipe/elastic/partition.hpp"

namespace {
//! Smallest slowest stage over all cut placements with stage 0 holding [0, frozen] and more.
double brute_force(const std::vector<double>& c, int K, int frozen, double lambda)
{
    const int n = static_cast<int>(c.size());
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> cuts{0};
    std::function<void(int)> rec = [&](int start) {
        const int k = static_cast<int>(cuts.size());  // stages opened so far + 1
        if (k == K) {
            cuts.push_back(n);
            double worst = 0;
            for (int s = 0; s < K; ++s) {
                double sum = 0;
                for (int i = cuts[s]; i < cuts[s + 1]; ++i) sum += (i < frozen ? lambda : 1.0) * c[i];
                worst = std::max(worst, sum);
            }
            best = std::min(best, worst);
            cuts.pop_back();
            return;
        }
        for (int next = std::max(start + 1, k == 1 ? frozen + 1 : 0); next <= n - (K - k); ++next) {
            cuts.push_back(next);
            rec(next);
            cuts.pop_back();
        }
    };
    rec(0);
    return best;
}
} // namespace

TEST_CASE("partition_layers equals brute force on random costs, stage counts and frozen prefixes")
{
    std::mt19937 rng(13);
    std::uniform_int_distribution<int> cost(0, 20);
    for (int trial = 0; trial < 400; ++trial) {
        const int n = 1 + trial % 11;
        std::vector<double> c(n);
        for (auto& x : c) x = cost(rng);  // integers: sums are exact in double
        const int frozen = static_cast<int>(rng() % n);
        const int K = 1 + static_cast<int>(rng() % (n - frozen));
        const double lambda = std::vector<double>{0, 1.0 / 8, 0.5, 1}[trial % 4];  // exact binary fractions
        const auto p = tpipe::elastic::partition_layers(c, K, frozen, lambda);
        INFO("n=" << n << " K=" << K << " frozen=" << frozen << " lambda=" << lambda);
        CHECK(p.max_stage_cost == brute_force(c, K, frozen, lambda));
        REQUIRE(p.cuts.size() == static_cast<std::size_t>(K + 1));
        CHECK(p.cuts.front() == 0);
        CHECK(p.cuts.back() == n);
        CHECK(p.cuts[1] > frozen);
        for (int s = 0; s < K; ++s) CHECK(p.cuts[s] < p.cuts[s + 1]);
        CHECK(p.max_stage_cost == *std::max_element(p.stage_costs.begin(), p.stage_costs.end()));
    }
}

TEST_CASE("partition of ViT-B/16 sublayers matches the logged stage sizes in total, and beats them")
{
    // embedding, (ATT, MLP) x 12, norm + head (1000 classes), in parameters.
    std::vector<double> c{742656};
    for (int b = 0; b < 12; ++b) c.push_back(2363904), c.push_back(4723968);
    c.push_back(1536 + 769000);
    const auto p = tpipe::elastic::partition_layers(c, 4);
    double total = 0;
    for (double s : p.stage_costs) total += s;
    CHECK(total == 86567656);
    CHECK(p.max_stage_cost <= 22034152);  // the released greedy's slowest stage at K = 4
}

TEST_CASE("a big outlier unit gets its own stage rather than an empty neighbour")
{
    const std::vector<double> c{100, 1, 1, 1, 1, 1, 1, 1};
    const auto p = tpipe::elastic::partition_layers(c, 4);
    CHECK(p.stage_costs.front() == 100);
    for (int s = 0; s < 4; ++s) CHECK(p.cuts[s] < p.cuts[s + 1]);
}

TEST_CASE("partition refuses impossible shapes and bad costs with a reason")
{
    const std::vector<double> c{1, 2, 3};
    CHECK_THROWS_WITH(tpipe::elastic::partition_layers(c, 4), Catch::Contains("active units"));
    CHECK_THROWS_WITH(tpipe::elastic::partition_layers(c, 2, 2), Catch::Contains("use fewer stages"));
    CHECK_THROWS_AS(tpipe::elastic::partition_layers(c, 0), tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::elastic::partition_layers(c, 1, 0, -1), tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::elastic::partition_layers(std::vector<double>{1, -2}, 1), tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::elastic::priced_partition(c, {0, 0, 3}), tpipe::invalid_argument);
    CHECK_THROWS_WITH(tpipe::elastic::priced_partition(c, {0, 1, 3}, 1), Catch::Contains("frozen prefix"));
    CHECK(tpipe::elastic::priced_partition(c, {0, 2, 3}, 1, 0.5).stage_costs == std::vector<double>{2.5, 3});
}

TEST_CASE("partition refuses costs whose sum is not finite and searches too large to finish, before the work",
          "[elastic][partition]")
{
    const std::vector<double> huge{1, 1e308, 1e308};
    CHECK_THROWS_WITH(tpipe::elastic::partition_layers(huge, 2), Catch::Contains("the costs add up to more than a double holds"));
    const std::vector<double> many(50'000, 1.0);
    CHECK_THROWS_WITH(tpipe::elastic::partition_layers(many, 1000),
                      Catch::Contains("50000 units x 1000 stages is about 1250000000000 steps of the exact search"));
    // At the limit's scale but inside it, the search runs.
    const std::vector<double> fine(2000, 1.0);
    CHECK(tpipe::elastic::partition_layers(fine, 4).max_stage_cost == 500);
}
