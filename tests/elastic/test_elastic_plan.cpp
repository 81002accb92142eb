// The elastic plan: the paper's ViT-B/16 setting (2 x 8 devices, K0 = 8, alpha = 1/3) as a
// regression of properties derived from the model: the freeze schedule is AutoFreeze's, the
// shape only shrinks and uses every device, each epoch's time is its iterations times the
// simulated iteration, the last epoch matches its closed form, and the ablation rows keep the
// paper's order.
#include <catch2/catch.hpp>

#include <cmath>

#include "tpipe/elastic/elastic_json.hpp"
#include "tpipe/elastic/elastic_plan.hpp"
#include "tpipe/elastic/elastic_presets.hpp"

namespace {
tpipe::elastic::elastic_options paper_setting(tpipe::elastic::elastic_components use)
{
    tpipe::elastic::elastic_options o;
    o.devices = 16;
    o.initial_stages = 8;
    o.epochs = 10;
    o.lambda = 0;
    o.use = use;
    return o;
}
tpipe::elastic::elastic_plan plan(tpipe::elastic::elastic_components use)
{
    tpipe::elastic::progressive_freeze third(tpipe::elastic::fraction{1, 3});
    return tpipe::elastic::plan_elastic(tpipe::elastic::presets::vit_b16_imagenet(), paper_setting(use), third);
}
constexpr tpipe::elastic::elastic_components baseline{false, false, false, false}, freeze_only{true, false, false, false},
    pipe_cache{true, true, false, true}, pipe_dp{true, true, true, false}, all{true, true, true, true};
} // namespace

TEST_CASE("the baseline keeps K0 stages and N / K0 replicas; each epoch is iterations x the simulated iteration")
{
    const auto m = tpipe::elastic::presets::vit_b16_imagenet();
    const auto p = plan(baseline);
    const std::int64_t iterations = (m.samples_per_epoch + 2 * m.batch - 1) / (2 * m.batch);
    for (const auto& e : p.epochs) {
        CHECK(e.record.frozen == 0);
        CHECK(e.record.stages == 8);
        CHECK(e.record.replicas == 2);
        CHECK(e.cache == tpipe::elastic::cache_use::off);
        CHECK(e.iterations == iterations);
        CHECK(e.seconds == Approx(iterations * e.iteration_seconds));
        CHECK(e.record.microbatches >= 8);
        CHECK(e.record.microbatches <= 48);
    }
    // The iteration is the simulator's answer for the planned shape.
    const tpipe::elastic::elastic_latency lat{&m, 16, 8, false, {}};
    const auto& e0 = p.epochs.front();
    CHECK(e0.iteration_seconds ==
          Approx(tpipe::elastic::simulate_iteration(lat.stage_times(e0.record.cuts, 0), m.batch, e0.record.microbatches)));
    CHECK(e0.record.cuts == tpipe::elastic::partition_layers(m.train_costs(), 8).cuts);
}

TEST_CASE("the plan freezes as AutoFreeze says, shrinks monotonically and uses every device")
{
    const auto m = tpipe::elastic::presets::vit_b16_imagenet();
    tpipe::elastic::progressive_freeze third(tpipe::elastic::fraction{1, 3});
    const auto schedule = tpipe::elastic::freeze_schedule(third, 12, 10);
    const auto p = plan(all);
    int stages = 8;
    bool written = false;
    for (std::size_t e = 0; e < p.epochs.size(); ++e) {
        const auto& r = p.epochs[e].record;
        CHECK(r.frozen == schedule[e]);
        CHECK(r.stages <= stages);
        CHECK(8 % r.stages == 0);
        CHECK(r.stages * r.replicas == 16);
        CHECK(r.cuts[1] > m.frozen_units(r.frozen));  // the frozen prefix stays on stage 0
        stages = r.stages;
        const auto c = p.epochs[e].cache;
        if (c == tpipe::elastic::cache_use::read || c == tpipe::elastic::cache_use::extend) CHECK(written);
        written = written || c != tpipe::elastic::cache_use::off;
        if (r.frozen == 0) CHECK(c == tpipe::elastic::cache_use::off);
    }
    CHECK(stages == 1);  // all 12 blocks frozen: the head alone is one stage
}

TEST_CASE("the last epoch of the full plan has its closed form: K = 1, M = 1, the head trains on cached inputs")
{
    const auto m = tpipe::elastic::presets::vit_b16_imagenet();
    const auto whole = plan(all);
    const auto& last = whole.epochs.back();
    REQUIRE(last.record.stages == 1);
    REQUIRE(last.record.microbatches == 1);
    REQUIRE(last.cache == tpipe::elastic::cache_use::read);
    const auto& head = m.units.back();
    const double head_forward = head.params * m.seconds_per_param;
    // One forward and one backward of the whole batch, then the ring all-reduce of the head.
    const double iteration = 2 * m.per_microbatch_seconds + m.batch * (m.cache_seconds() + 3 * head_forward) +
                             2.0 * 15 / 16 * head.params * m.gradient_bytes_per_param / m.allreduce_bandwidth;
    CHECK(last.iteration_seconds == Approx(iteration).epsilon(1e-12));
    const std::int64_t iterations = (m.samples_per_epoch + 16 * m.batch - 1) / (16 * m.batch);
    CHECK(last.record.predicted_throughput == Approx(m.samples_per_epoch / (iterations * iteration)));
}

TEST_CASE("ablation rows keep the paper's order and the full plan more than doubles the baseline")
{
    const double base = plan(baseline).seconds;
    const double f = base / plan(freeze_only).seconds, pc = base / plan(pipe_cache).seconds,
                 pd = base / plan(pipe_dp).seconds, a = base / plan(all).seconds;
    INFO("freeze only " << f << ", +pipe+cache " << pc << ", +pipe+dp " << pd << ", all " << a);
    CHECK(f < 1);  // the frozen prefix on the first device slows it down (paper: 0.95x)
    CHECK(f < pc);
    CHECK(pc < pd);
    CHECK(pd < a);
    CHECK(a > 2);
    // Without AutoPipe neither AutoDP nor AutoCache applies: the plan says so.
    CHECK(plan({true, false, true, true}).use == freeze_only);
}

TEST_CASE("lambda from the model prices stage 0 as it runs; the paper's rule keeps its <=")
{
    auto o = paper_setting(all);
    o.lambda.reset();
    tpipe::elastic::progressive_freeze third(tpipe::elastic::fraction{1, 3});
    const auto m = tpipe::elastic::presets::vit_b16_imagenet();
    const auto p = tpipe::elastic::plan_elastic(m, o, third);
    // Charging the frozen prefix its real time can only make the halving test harder.
    const auto code = plan(all);
    for (std::size_t e = 0; e < p.epochs.size(); ++e) CHECK(p.epochs[e].record.stages >= code.epochs[e].record.stages);
}

TEST_CASE("elastic model JSON round trip and refusals")
{
    const auto v = tpipe::json::parse(R"({"name": "tiny", "layers": 2, "samples_per_epoch": 64, "batch": 8,
        "seconds_per_param": 1e-6, "per_microbatch_seconds": 1e-3,
        "units": [{"name": "b0", "params": 100, "block": 0}, {"name": "b1", "params": 100, "block": 1},
                  {"name": "head", "params": 10, "block": 2}]})");
    const auto m = tpipe::elastic::elastic_model_from_json(v);
    CHECK(m.units.size() == 3);
    CHECK(m.frozen_units(1) == 1);
    tpipe::elastic::progressive_freeze half(tpipe::elastic::fraction{1, 2});
    tpipe::elastic::elastic_options o;
    o.devices = 2;
    o.initial_stages = 2;
    o.epochs = 3;
    const auto p = tpipe::elastic::plan_elastic(m, o, half);
    CHECK(p.epochs.back().record.frozen == 2);
    CHECK(p.epochs.back().record.stages == 1);
    CHECK(p.epochs.back().record.replicas == 2);
    CHECK_THROWS_AS(tpipe::elastic::elastic_model_from_json(tpipe::json::parse(R"({"layers": 1, "unitz": []})")),
                    tpipe::parse_error);
    // The last unit must be the head (block = layers), and blocks must not decrease.
    CHECK_THROWS_WITH(tpipe::elastic::elastic_model_from_json(tpipe::json::parse(
                          R"({"layers": 2, "units": [{"params": 1, "block": 0}, {"params": 1, "block": 1}]})")),
                      Catch::Contains("head"));
    CHECK_THROWS_WITH(tpipe::elastic::elastic_model_from_json(tpipe::json::parse(
                          R"({"layers": 2, "units": [{"params": 1, "block": 1}, {"params": 1, "block": 0},
                              {"params": 1, "block": 2}]})")),
                      Catch::Contains("prefix"));
}

TEST_CASE("a cache larger than the host budget reads the rest from disk")
{
    auto m = tpipe::elastic::presets::vit_b16_imagenet();
    const double in_memory = m.cache_seconds();
    const double per_node = static_cast<double>(m.samples_per_epoch) / m.nodes * m.activation_bytes;
    m.cache_budget_bytes = per_node / 4;
    CHECK_THROWS_WITH(m.validate(), Catch::Contains("disk_bandwidth"));
    m.disk_bandwidth = 2e9;
    m.validate();
    CHECK(m.cache_seconds() == Approx(in_memory + 0.75 * m.activation_bytes / m.disk_bandwidth));
}
