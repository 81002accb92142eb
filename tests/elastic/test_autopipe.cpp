// AutoPipe: the simulated iteration has GPipe's closed form on balanced stages; the microbatch
// count is the simulated optimum of its range; the pipeline halves exactly while the halved
// partition's slowest stage does not exceed the starting one (<=, or < on request); freed
// devices become replicas.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "tpipe/elastic/autopipe.hpp"
#include "tpipe/elastic/shape_planner.hpp"

namespace {
//! Seconds proportional to cost: forward c per sample, backward 2c for active units.
struct proportional_latency {
    std::vector<double> costs;
    double per_microbatch = 0;
    tpipe::elastic::stage_times stage_times(std::span<const int> cuts, int frozen) const
    {
        tpipe::elastic::stage_times t;
        t.per_microbatch = per_microbatch;
        for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
            double f = 0, b = 0;
            for (int i = cuts[s]; i < cuts[s + 1]; ++i) f += costs[i], b += i < frozen ? 0 : 2 * costs[i];
            t.forward.push_back(f);
            t.backward.push_back(b);
        }
        return t;
    }
};
} // namespace

TEST_CASE("simulated GPipe iteration on equal stages is (M + K - 1)(f + b) B / M")
{
    for (int K : {1, 2, 4, 8})
        for (int M : {1, 3, 8, 16}) {
            tpipe::elastic::stage_times t;
            t.forward.assign(K, 0.5);
            t.backward.assign(K, 1.0);
            const double B = 32;
            CHECK(tpipe::elastic::simulate_iteration(t, B, M) == Approx((M + K - 1) * 1.5 * B / M));
        }
}

TEST_CASE("a fixed cost per microbatch compute adds (M + K - 1)(fixed forward + fixed backward)")
{
    for (int K : {1, 2, 4})
        for (int M : {1, 3, 8}) {
            tpipe::elastic::stage_times t;
            t.forward.assign(K, 0.5);
            t.backward.assign(K, 1.0);
            t.forward_fixed.assign(K, 0.25);
            t.backward_fixed.assign(K, 0.125);
            const double B = 32;
            CHECK(tpipe::elastic::simulate_iteration(t, B, M) == Approx((M + K - 1) * (1.5 * B / M + 0.375)));
        }
}

TEST_CASE("measured unit times with fixed parts: a stage pays its units' fixed parts, the cached frozen ones' not")
{
    tpipe::elastic::unit_latency lat;
    lat.units = {.forward = {1, 2, 3, 4}, .backward = {10, 20, 30, 40}};
    lat.units.forward_fixed = {0.1, 0.2, 0.3, 0.4};
    lat.units.backward_fixed = {0.01, 0.02, 0.03, 0.04};
    const std::vector<int> cuts{0, 2, 4};
    const auto t = lat.stage_times(cuts, 1);  // unit 0 frozen, its outputs cached
    REQUIRE(t.forward_fixed.size() == 2);
    CHECK(t.forward == std::vector<double>{2, 7});
    CHECK(t.backward == std::vector<double>{20, 70});
    CHECK(t.forward_fixed[0] == Approx(0.2));
    CHECK(t.forward_fixed[1] == Approx(0.7));
    CHECK(t.backward_fixed[0] == Approx(0.02));
    CHECK(t.backward_fixed[1] == Approx(0.07));
    lat.cached = false;  // the frozen unit runs its forward in the pipeline
    CHECK(lat.stage_times(cuts, 1).forward_fixed[0] == Approx(0.3));
}

TEST_CASE("microbatch count is the simulated optimum over K .. 6K")
{
    tpipe::elastic::stage_times t;
    t.forward.assign(4, 1e-3);
    t.backward.assign(4, 2e-3);
    t.per_microbatch = 5e-3;
    const auto c = tpipe::elastic::choose_microbatches(t, 64);
    double best = 1e300;
    int arg = 0;
    for (int m = 4; m <= 24; ++m)
        if (double s = tpipe::elastic::simulate_iteration(t, 64, m); s < best) best = s, arg = m;
    CHECK(c.microbatches == arg);
    CHECK(c.iteration_seconds == best);
    CHECK(arg > 4);
    CHECK(arg < 24);  // the fixed cost per microbatch makes both ends lose
    t.per_microbatch = 0;
    CHECK(tpipe::elastic::choose_microbatches(t, 64).microbatches == 24);  // free microbatches: the most wins
    CHECK(tpipe::elastic::choose_microbatches(t, 3).microbatches == 3);    // never more microbatches than samples

    // One stage simulates alike for every count (up to rounding): the fewest microbatches, whose
    // fixed costs the per-sample times leave out.
    tpipe::elastic::stage_times one;
    one.forward.assign(1, 1.7e-4);
    one.backward.assign(1, 3.1e-4);
    for (int batch = 1; batch <= 24; ++batch) {
        INFO("batch " << batch);
        CHECK(tpipe::elastic::choose_microbatches(one, batch).microbatches == 1);
    }
}

TEST_CASE("autopipe halves while the halved slowest stage <= the starting one")
{
    const std::vector<double> costs(8, 1.0);
    tpipe::elastic::autopipe_options o;
    o.devices = 8;
    o.initial_stages = 4;
    o.batch = 16;
    tpipe::elastic::autopipe pipe(costs, o, proportional_latency{costs});
    CHECK(pipe.reference_cost() == 2);
    const auto start = pipe.initial();
    CHECK(start.stages == 4);
    CHECK(start.replicas == 2);
    CHECK(pipe.replan(2, 4).stages == 4);  // 6 active over 2 stages: 3 > 2
    const auto at4 = pipe.replan(4, 4);    // 4 active over 2 stages: 2 <= 2; over 1: 4 > 2
    CHECK(at4.stages == 2);
    CHECK(at4.replicas == 4);
    CHECK(at4.layers.cuts == std::vector<int>{0, 6, 8});
    CHECK(pipe.replan(6, 4).stages == 1);  // two levels at once: 8 replicas
    CHECK(pipe.replan(6, 4).replicas == 8);
    CHECK(pipe.replan(7, 4).stages == 1);

    o.strict = true;  // "<" as Algorithm 1 prints it: equality no longer halves
    tpipe::elastic::autopipe strict(costs, o, proportional_latency{costs});
    CHECK(strict.replan(4, 4).stages == 4);
    CHECK(strict.replan(6, 4).stages == 2);  // 2 active: 1 < 2 halves to 2, but 2 < 2 does not

    o.strict = false;
    o.add_replicas = false;  // no AutoDP: freed devices idle
    tpipe::elastic::autopipe no_dp(costs, o, proportional_latency{costs});
    CHECK(no_dp.replan(4, 4).replicas == 2);

    o.add_replicas = true;
    o.min_stages = 2;
    tpipe::elastic::autopipe floor2(costs, o, proportional_latency{costs});
    CHECK(floor2.replan(6, 4).stages == 2);
    CHECK_THROWS_WITH(floor2.replan(7, 4), Catch::Contains("min_stages"));  // 1 active unit cannot fill 2
}

TEST_CASE("autopipe's chosen shape is the halving fixpoint on random costs")
{
    std::mt19937 rng(7);
    for (int trial = 0; trial < 60; ++trial) {
        std::vector<double> costs(6 + trial % 10);
        for (auto& c : costs) c = 1 + static_cast<double>(rng() % 9);
        tpipe::elastic::autopipe_options o;
        o.devices = 16;
        o.initial_stages = 4;
        o.batch = 8;
        tpipe::elastic::autopipe pipe(costs, o, proportional_latency{costs, 1e-3});
        const double ref = pipe.reference_cost();
        const int n = static_cast<int>(costs.size());
        for (int f = 0; f < n; ++f) {
            const auto s = pipe.replan(f, 4);
            INFO("trial " << trial << " frozen " << f);
            CHECK(s.replicas * s.stages == 16);
            CHECK(s.layers.stages() == s.stages);
            const bool forced = n - f < s.stages * 2 && s.stages < 4;
            if (s.stages < 4 && !forced) CHECK(s.layers.max_stage_cost <= ref);
            if (s.stages > 1 && n - f >= s.stages / 2)
                CHECK(tpipe::elastic::partition_layers(costs, s.stages / 2, f).max_stage_cost > ref);
        }
    }
}

TEST_CASE("autopipe refuses bad shapes")
{
    const std::vector<double> costs(4, 1.0);
    proportional_latency lat{costs};
    tpipe::elastic::autopipe_options o;
    o.devices = 6;
    o.initial_stages = 4;
    CHECK_THROWS_AS(tpipe::elastic::autopipe(costs, o, lat), tpipe::invalid_argument);
    o.devices = 8;
    tpipe::elastic::autopipe pipe(costs, o, lat);
    CHECK_THROWS_AS(pipe.replan(4, 4), tpipe::invalid_argument);  // the head stays active
    CHECK_THROWS_AS(pipe.replan(1, 3), tpipe::invalid_argument);
}
