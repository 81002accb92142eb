// The interval forecast (tpipe/elastic/interval_forecast.hpp): the frozen-prefix rows it expects
// are the rows the driver's AutoCache then serves, computes and extends, interval by interval,
// whether an interval is shorter or longer than an epoch; its seconds are the closed form.
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "tpipe/elastic/interval_forecast.hpp"
#include "tpipe/elastic/thread_driver.hpp"

#include "chain_model.hpp"

namespace {
using tpipe_test::chain;

std::vector<double> samples32()
{
    std::vector<double> data(32);
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = 0.5 + 0.03 * static_cast<double>(k % 11);
    return data;
}

tpipe::elastic::driver_options options(std::int64_t freeze_every, bool autocache)
{
    tpipe::elastic::driver_options o;
    o.devices = 2;
    o.batch = 8;  // 4 steps per epoch of 32 samples
    o.steps = 24;
    o.freeze_every = freeze_every;
    o.autocache = autocache;
    o.threads = 2;
    o.measured = {{1.0, 2.0, 4.0, 8.0, 16.0}, std::vector<double>(5, 1.0), {0.5, 0.25, 0.125, 0.0625, 0.03125}};
    // 0, 1, 1, 3, 3, 3, ...: a first freeze, an interval that keeps it, a deeper one
    o.freeze = [](int interval, int) { return interval == 0 ? 0 : interval < 3 ? 1 : 3; };
    return o;
}
} // namespace

TEST_CASE("interval forecast: the frozen rows it expects are the rows the driver counts", "[elastic][forecast]")
{
    const auto data = samples32();
    for (std::int64_t every : {2, 3, 4, 6}) {  // half an epoch, not dividing it, one, one and a half
        for (bool cache : {true, false}) {
            CAPTURE(every, cache);
            tpipe::elastic::thread_driver<chain> d([&] { return std::make_unique<chain>(5, data); }, 32, options(every, cache));
            const auto report = d.run();
            std::int64_t computed = 0, extended = 0, served = 0;
            for (const auto& iv : report.intervals) {
                CAPTURE(iv.plan.epoch);
                REQUIRE(iv.predicted_rows.full == iv.rows_computed);
                REQUIRE(iv.predicted_rows.extended == iv.rows_extended);
                REQUIRE(iv.predicted_rows.cached == iv.rows_cached);
                computed += iv.rows_computed, extended += iv.rows_extended, served += iv.rows_cached;
            }
            // Not a vacuous match: the cached runs see every source, the uncached ones compute every row.
            if (cache) REQUIRE((computed > 0 && extended > 0 && served > 0));
            else REQUIRE((computed > 0 && extended == 0 && served == 0));
        }
    }
}

TEST_CASE("interval forecast: an interval's seconds are its steps at the shape's pace, its rows' units, its updates",
          "[elastic][forecast]")
{
    tpipe::elastic::cache_forecast f(32, 8, 1, true);
    const tpipe::elastic::unit_seconds u{{1.0, 2.0, 4.0, 8.0, 16.0}, std::vector<double>(5, 1.0), {0.5, 0.25, 0.125, 0.0625, 0.03125}};
    // One epoch frozen at 1: every row computes unit 0.
    auto w = f.interval(0, 4, 1, u);
    REQUIRE(w.rows.full == 32);
    REQUIRE(w.seconds == 32 * 1.0);
    // The next epoch at 3: every row extends from level 1 through units 1 and 2.
    w = f.interval(4, 4, 3, u);
    REQUIRE(w.rows.extended == 32);
    REQUIRE(w.seconds == 32 * (2.0 + 4.0));
    // Then every row is served; a shallower request recomputes from the sample and caches nothing.
    w = f.interval(8, 4, 3, u);
    REQUIRE((w.rows.cached == 32 && w.seconds == 0));
    w = f.interval(12, 1, 2, u);
    REQUIRE((w.rows.full == 8 && w.seconds == 8 * 3.0));
    REQUIRE(tpipe::elastic::update_seconds(u, 3) == 0.0625 + 0.03125);
    REQUIRE(tpipe::elastic::update_seconds({{1.0}, {1.0}, {}}, 0) == 0);  // not measured: priced 0
    // The all-reduce: the slowest stage's units, scaled by the ring's 2(r - 1)/r (1 at r = 2).
    tpipe::elastic::unit_seconds r{{1, 1, 1, 1}, {1, 1, 1, 1}, {}, {0.25, 0.5, 1.0, 0.125}};
    const int cuts[] = {1, 3, 4};  // stages of units 1-2 and 3
    REQUIRE(tpipe::elastic::reduce_seconds(r, cuts, 2) == 1.5);
    REQUIRE(tpipe::elastic::reduce_seconds(r, cuts, 4) == 1.5 * 1.5);
    REQUIRE(tpipe::elastic::reduce_seconds(r, cuts, 1) == 0);  // one replica: nothing to reduce
    REQUIRE(tpipe::elastic::reduce_seconds(u, cuts, 2) == 0);  // not measured: priced 0
    REQUIRE_THROWS_WITH(f.interval(16, 1, 6, u), Catch::Contains("6 frozen units of 5 measured"));
    // Without the cache every row is computed, every epoch.
    tpipe::elastic::cache_forecast uncached(32, 8, 1, false);
    w = uncached.interval(0, 8, 3, u);
    REQUIRE((w.rows.full == 64 && w.seconds == 64 * (1.0 + 2.0 + 4.0)));

    // In the driver: the interval that extends 1 -> 3 is predicted to take its frozen work (rows
    // x units 1 and 2, over 2 replicas) longer than the next, all cached, interval of the same shape.
    const auto data = samples32();
    auto o = options(4, true);
    tpipe::elastic::thread_driver<chain> d([&] { return std::make_unique<chain>(5, data); }, 32, o);
    const auto report = d.run();
    REQUIRE(report.intervals.size() == 6);
    const auto& extending = report.intervals[3];
    const auto& cached = report.intervals[4];
    REQUIRE((extending.plan.frozen == 3 && cached.plan.frozen == 3 && extending.plan.replicas == 2));
    REQUIRE(extending.predicted_seconds - cached.predicted_seconds == Approx(32 * (2.0 + 4.0) / 2));
    REQUIRE(cached.plan.predicted_throughput == Approx(4.0 * 8 / cached.predicted_seconds));
}
