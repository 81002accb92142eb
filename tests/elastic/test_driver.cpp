// The elastic driver with a model of its own (not the GPT): a chain of scalar units y = w_i x
// with a squared loss. Elastic training -- freezing, a shorter pipeline, a new replica, the cache
// -- gives the weights a plain loop gives with the same freezing, replica split and samples.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tpipe/elastic/thread_driver.hpp"

#include "chain_model.hpp"

namespace {
using tpipe_test::chain;

// The MPI driver's concept, both ways: the chain models it; a near miss whose
// trainable_gradients() returns plain values is still a freezable_model, but not a process one.
struct chain_values_gradients : chain {
    std::vector<double> trainable_gradients();
};
static_assert(tpipe::elastic::process_freezable_model<chain>);
static_assert(tpipe::elastic::freezable_model<chain_values_gradients>);
static_assert(!tpipe::elastic::process_freezable_model<chain_values_gradients>);

// And the driver's own concept: near misses that are no freezable_model.
struct chain_float_costs : chain {  // unit_costs() must be a std::vector<double> (AutoPipe's input)
    std::vector<float> unit_costs() const;
};
struct chain_frozen_pointer : chain {  // run_frozen() must give a frozen_output, the cache's value
    frozen_output* run_frozen(std::int64_t, std::optional<frozen_output>, int, int);
};
struct chain_unsendable_output : chain {  // the frozen output is cached as bytes: it needs a byte form
    struct opaque {
        double v = 0;
    };
    using frozen_output = opaque;
};
static_assert(tpipe::elastic::freezable_model<chain>);
static_assert(!tpipe::elastic::freezable_model<chain_float_costs>);
static_assert(!tpipe::elastic::freezable_model<chain_frozen_pointer>);
static_assert(!tpipe::elastic::freezable_model<chain_unsendable_output>);
} // namespace

TEST_CASE("elastic driver: a user model trains like a plain loop with the same freezing and replicas", "[elastic][driver]")
{
    std::vector<double> data(32);
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = 0.5 + 0.03 * static_cast<double>(k % 11);
    const int units = 5;  // 4 freezable, the last (the loss's unit) always trains
    // [snippet:user_driver]
    tpipe::elastic::driver_options o;
    o.devices = 2;                       // start as a 2-stage pipeline
    o.batch = 8;                         // samples per step over all replicas
    o.steps = 16;
    o.freeze_every = 4;                  // re-plan every 4 steps (default: every epoch)
    o.threads = 2;
    o.measured = {std::vector<double>(units, 1.0), std::vector<double>(units, 2.0)};  // per unit, s/sample
    o.freeze = [](int interval, int) { return interval == 0 ? 0 : interval == 1 ? 2 : 3; };
    tpipe::elastic::thread_driver<chain> driver([&] { return std::make_unique<chain>(units, data); },
                                                static_cast<std::int64_t>(data.size()), o);
    const auto report = driver.run();
    // [/snippet]
    REQUIRE(report.intervals.size() == 4);
    REQUIRE(report.intervals[0].plan.stages == 2);
    REQUIRE(report.intervals[0].plan.replicas == 1);
    REQUIRE(report.intervals[2].plan.frozen == 3);
    REQUIRE(report.intervals[2].plan.stages == 1);   // 1 active unit and the loss's: one stage
    REQUIRE(report.intervals[2].plan.replicas == 2);  // the freed device is a replica
    REQUIRE(report.replicas_identical);
    REQUIRE(report.replans_kept_weights);
    REQUIRE(report.intervals[2].rows_extended > 0);  // 2 -> 3 ran only unit 2 on cached outputs
    REQUIRE(report.intervals[3].rows_cached == 32);  // epoch 3: every sample from the cache

    // The plain loop: the same samples, replicas' gradients averaged, frozen units untouched.
    std::vector<double> w(units);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.9 + 0.05 * static_cast<double>(i);
    const std::vector<double> initial = w;
    tpipe::elastic::epoch_sampler sampler({.samples = static_cast<std::int64_t>(data.size()), .batch = o.batch, .seed = o.seed});
    for (const auto& iv : report.intervals) {
        const int F = iv.plan.frozen, D = iv.plan.replicas;
        for (std::int64_t step = iv.first_step; step < iv.first_step + iv.steps; ++step) {
            std::vector<double> g(w.size(), 0.0);
            for (int d = 0; d < D; ++d) {
                const auto ids = sampler.shard(step, d, D);
                for (auto id : ids) {
                    std::vector<double> in{data[static_cast<std::size_t>(id)]};
                    for (int i = 0; i < units; ++i) in.push_back(in.back() * w[static_cast<std::size_t>(i)]);
                    double dy = (in.back() - 1) / static_cast<double>(ids.size()) / D;
                    for (int i = units - 1; i >= 0; --i) {
                        g[static_cast<std::size_t>(i)] += in[static_cast<std::size_t>(i)] * dy;
                        dy *= w[static_cast<std::size_t>(i)];
                    }
                }
            }
            for (int i = F; i < units; ++i) w[static_cast<std::size_t>(i)] -= 0.05 * g[static_cast<std::size_t>(i)];
        }
    }
    const auto& trained = driver.replica(0).w;
    for (int i = 0; i < units; ++i) REQUIRE(trained[static_cast<std::size_t>(i)] == Approx(w[static_cast<std::size_t>(i)]).epsilon(1e-12));
    for (int i = 0; i < 2; ++i) REQUIRE(trained[static_cast<std::size_t>(i)] != initial[static_cast<std::size_t>(i)]);  // trained before freezing
    REQUIRE(trained[3] != initial[3]);
    REQUIRE(driver.replica(1).w == trained);
}

TEST_CASE("elastic driver: refuses to plan without unit times or with a batch the devices cannot share", "[elastic][driver]")
{
    std::vector<double> data(16, 1.0);
    tpipe::elastic::driver_options o;
    o.devices = 2;
    o.batch = 4;
    o.steps = 1;
    tpipe::elastic::thread_driver<chain> d([&] { return std::make_unique<chain>(3, data); }, 16, o);
    REQUIRE_THROWS_WITH(d.run(), Catch::Contains("measured unit times for 0 forward"));
    o.measured = {std::vector<double>(3, 1.0), std::vector<double>(3, 1.0)};
    o.batch = 5;
    tpipe::elastic::thread_driver<chain> e([&] { return std::make_unique<chain>(3, data); }, 15, o);
    REQUIRE_THROWS_WITH(e.run(), Catch::Contains("must be a multiple of the 2 devices"));
    o.batch = 4;
    for (double bad : {0.0, -1.0}) {  // refused at the input, not as a schedule's or the JSON's error later
        o.measured = {std::vector<double>(3, 1.0), {1.0, bad, 1.0}};
        tpipe::elastic::thread_driver<chain> z([&] { return std::make_unique<chain>(3, data); }, 16, o);
        REQUIRE_THROWS_WITH(z.run(), Catch::Contains("measured unit time backward[1] is " + std::to_string(bad) +
                                                     " s; every unit's time must be a positive number of seconds"));
    }
    o.measured = {std::vector<double>(3, 1.0), std::vector<double>(3, 1.0), {0.5}};  // one unit's optimizer step of 3
    tpipe::elastic::thread_driver<chain> u([&] { return std::make_unique<chain>(3, data); }, 16, o);
    REQUIRE_THROWS_WITH(u.run(), Catch::Contains("update times for 1 units; give none, or 3 (one per unit)"));
}

namespace {

//! The data of the stop and resume cases: 32 samples.
std::vector<double> four_interval_data()
{
    std::vector<double> data(32);
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = 0.5 + 0.03 * static_cast<double>(k % 11);
    return data;
}

//! 16 steps of 8 samples on 2 devices in intervals of 4 steps; the caller sets the freezing.
tpipe::elastic::driver_options four_intervals(int units)
{
    tpipe::elastic::driver_options o;
    o.devices = 2;
    o.batch = 8;
    o.steps = 16;
    o.freeze_every = 4;
    o.threads = 2;
    o.measured = {std::vector<double>(static_cast<std::size_t>(units), 1.0),
                  std::vector<double>(static_cast<std::size_t>(units), 2.0)};
    return o;
}

} // namespace

TEST_CASE("elastic driver: a stop asked for mid-interval ends the run there, with the weights of a run of that length",
          "[elastic][driver]")
{
    const std::vector<double> data = four_interval_data();
    const int units = 5;
    tpipe::elastic::driver_options o = four_intervals(units);
    o.freeze = [](int interval, int) { return interval == 0 ? 0 : 2; };
    std::vector<std::int64_t> asked;
    o.stop = [&](std::int64_t done) {
        asked.push_back(done);
        return done == 6;  // e.g. SIGTERM seen after the 6th step: inside the second interval
    };
    tpipe::elastic::thread_driver<chain> stopped([&] { return std::make_unique<chain>(units, data); },
                                                 static_cast<std::int64_t>(data.size()), o);
    const auto report = stopped.run();
    REQUIRE(report.stopped_after == 6);
    REQUIRE(asked == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6});  // before every step, then no more
    REQUIRE(report.intervals.size() == 2);
    REQUIRE(report.intervals[0].steps == 4);
    REQUIRE(report.intervals[1].steps == 2);

    o.stop = {};
    o.steps = 6;  // the same run, told its length
    tpipe::elastic::thread_driver<chain> shorter([&] { return std::make_unique<chain>(units, data); },
                                                 static_cast<std::int64_t>(data.size()), o);
    const auto full = shorter.run();
    REQUIRE(full.stopped_after == -1);
    REQUIRE(full.intervals.size() == 2);
    REQUIRE(stopped.replica(0).w == shorter.replica(0).w);
    REQUIRE(stopped.replica(1).w == shorter.replica(1).w);

    // Asked to stop before the first step: nothing is trained and no interval is reported.
    o.steps = 16;
    o.stop = [](std::int64_t) { return true; };
    tpipe::elastic::thread_driver<chain> none([&] { return std::make_unique<chain>(units, data); },
                                              static_cast<std::int64_t>(data.size()), o);
    const auto empty = none.run();
    REQUIRE(empty.stopped_after == 0);
    REQUIRE(empty.intervals.empty());
}

TEST_CASE("elastic driver: a run resumed mid-interval from a step's state and plan trains to the uninterrupted run's bits",
          "[elastic][driver]")
{
    const std::vector<double> data = four_interval_data();
    const int units = 5;
    tpipe::elastic::driver_options o = four_intervals(units);
    o.freeze = [](int interval, int) { return interval == 0 ? 0 : interval < 3 ? 2 : 3; };
    // What a checkpoint after every step would hold: replica 0's weights and the step's plan.
    struct saved {
        std::vector<double> w;
        tpipe::elastic::replan_record plan;
    };
    std::map<std::int64_t, saved> after;
    tpipe::elastic::thread_driver<chain>* running = nullptr;
    o.after_step = [&](std::int64_t done, const tpipe::elastic::replan_record& plan) {
        after[done] = {running->replica(0).w, plan};
    };
    tpipe::elastic::thread_driver<chain> whole([&] { return std::make_unique<chain>(units, data); },
                                               static_cast<std::int64_t>(data.size()), o);
    running = &whole;
    whole.run();
    REQUIRE(after.size() == 16);
    REQUIRE(after.begin()->first == 1);
    REQUIRE(after.at(4).plan.frozen == 0);
    REQUIRE(after.at(5).plan.frozen == 2);
    REQUIRE(after.at(16).plan.frozen == 3);
    REQUIRE(after.at(16).w == whole.replica(0).w);

    o.after_step = {};
    // Mid-interval (2 with nothing frozen; 6: the second interval's third step), at an interval's end (8, before a
    // re-plan that keeps the frozen count) and before one that freezes more (12).
    for (std::int64_t at : {2, 6, 8, 12}) {
        CAPTURE(at);
        const auto& s = after.at(at);
        tpipe::elastic::thread_driver<chain> resumed([&] { return std::make_unique<chain>(units, data); },
                                                     static_cast<std::int64_t>(data.size()), o);
        resumed.replica(0).w = s.w;
        resumed.replica(0).freeze(s.plan.frozen);
        const auto report = resumed.run({}, tpipe::elastic::resume_point{at, s.plan});
        REQUIRE(report.intervals.front().first_step == at);
        // The plan of the whole run's next step: the saved one kept, or the same re-plan.
        const auto& want = after.at(at + 1).plan;
        const auto& got = report.intervals.front().plan;
        REQUIRE(got.frozen == want.frozen);
        REQUIRE(got.stages == want.stages);
        REQUIRE(got.replicas == want.replicas);
        REQUIRE(got.cuts == want.cuts);
        REQUIRE(got.microbatches == want.microbatches);
        REQUIRE(report.intervals.front().steps == 4 - at % 4);
        REQUIRE(report.replans_kept_weights);
        REQUIRE(resumed.replica(0).w == whole.replica(0).w);
        REQUIRE(resumed.replica(1).w == whole.replica(1).w);
    }

    // Nothing left to train is refused, not reported as an empty run.
    tpipe::elastic::thread_driver<chain> done([&] { return std::make_unique<chain>(units, data); },
                                              static_cast<std::int64_t>(data.size()), o);
    REQUIRE_THROWS_WITH(done.run({}, tpipe::elastic::resume_point{16, after.at(16).plan}),
                        Catch::Contains("resumed after step 16 of 16: nothing is left to train"));
}

TEST_CASE("elastic driver: a saved plan is restored exactly where this run can hold it, re-planned where not",
          "[elastic][driver]")
{
    const int units = 5;
    tpipe::elastic::driver_options o;
    o.devices = 4;
    o.batch = 8;
    o.seq_len = 16;
    o.measured = {std::vector<double>(units, 1.0), std::vector<double>(units, 2.0)};
    const tpipe::elastic::shape_planner four(std::vector<double>(units, 1.0), units - 1, o);
    const auto later = four.replan(3, 4);
    const auto saved = later.record(2, true);
    const auto back = four.restore(saved);
    REQUIRE(back.has_value());
    REQUIRE(back->record(2, true) == saved);
    REQUIRE(back->stage_cuts == later.stage_cuts);
    REQUIRE(back->units.microbatches() == later.units.microbatches());
    REQUIRE(four.resume(saved, 3).record(2, true) == saved);  // freezing no more: the saved plan

    // On 1 device the plan's replicas do not fit: resume re-plans from its frozen count.
    o.devices = 1;
    const tpipe::elastic::shape_planner one(std::vector<double>(units, 1.0), units - 1, o);
    if (saved.stages * saved.replicas > 1) REQUIRE_FALSE(one.restore(saved).has_value());
    const auto again = one.resume(saved, 3);
    REQUIRE(again.frozen == 3);
    REQUIRE(again.stages * again.replicas == 1);

    // A damaged plan is not restored: cuts that leave the first stage no active unit.
    auto bad = saved;
    bad.cuts = {0, 3, units};
    bad.stages = 2;
    bad.replicas = 1;
    REQUIRE_FALSE(four.restore(bad).has_value());
}
