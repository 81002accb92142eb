// TeraPipe inside PipeTransformer: the elastic driver re-slices tokens at every re-plan for the
// new pipeline depth, the frozen prefix's output feeds the slices of the first active stage, and
// the run equals the same freezing without pipelines, replicas or a cache, given the same slices.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <tpipe/elastic/replan.hpp>

#include "gpt/elastic.hpp"

#include "../elastic/rows_free_unit.hpp"

namespace {

std::string letters(std::size_t n, std::uint64_t seed)
{
    std::string t(n, ' ');
    for (auto& c : t) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        c = static_cast<char>('a' + (seed >> 33) % 26);
    }
    return t;
}

} // namespace

TEST_CASE("elastic training with TeraPipe slices equals the frozen reference given the same slices, bitwise",
          "[elastic][terapipe]")
{
    gpt::config cfg;
    cfg.vocab = 128;
    cfg.d_model = 16;
    cfg.heads = 2;
    cfg.layers = 4;
    cfg.seq_len = 16;
    cfg.tied = false;
    const std::string text = letters(16 * 24 + 1, 5);  // 24 samples
    const gpt::window_dataset data(text, cfg.seq_len, 4);
    gpt::elastic_options o;
    o.devices = 2;
    o.batch = 4;
    o.steps = 15;
    o.freeze_every = 3;
    o.threads = 2;
    o.freeze = [](int interval, int frozen) { return interval == 0 ? 0 : interval == 1 ? 1 : interval == 2 ? 3 : frozen; };
    tpipe::elastic::token_slicing t;
    t.granularity = 4;
    for (int u = 0; u <= cfg.layers; ++u) t.units.push_back(tpipe_test::rows_free_unit());
    o.slicing = t;
    const auto run = gpt::train_elastic(cfg, data, o);
    REQUIRE(run.intervals.size() == 5);
    const auto& first = run.intervals[0];
    REQUIRE(first.plan.stages == 2);
    REQUIRE(first.units.max_slices() > 1);  // token slices in the 2-stage pipeline
    REQUIRE(first.plan.slices.size() == static_cast<std::size_t>(first.units.microbatches()));
    const auto& frozen1 = run.intervals[1];
    REQUIRE(frozen1.plan.frozen == 1);
    REQUIRE(frozen1.plan.stages == 2);
    REQUIRE(frozen1.units.max_slices() > 1);  // the frozen prefix's cached output feeds the slices
    REQUIRE(run.intervals[2].plan.stages == 1);  // one stage: the DP has no fill to shorten
    REQUIRE(run.intervals[2].plan.replicas == 2);
    REQUIRE(run.intervals[2].plan.slices.empty());
    REQUIRE(run.intervals[4].rows_cached > 0);
    REQUIRE(run.replicas_identical);
    REQUIRE(run.replans_kept_weights);
    REQUIRE(run.weights == gpt::train_frozen_reference(cfg, data, o, run.intervals));

    // The record carries the slices through its JSON line.
    const auto line = first.plan.to_json_line();
    REQUIRE(line.find("\"slices\"") != std::string::npos);
    REQUIRE(tpipe::elastic::replan_record::from_json(tpipe::json::parse(line)) == first.plan);
    REQUIRE(run.intervals[2].plan.to_json_line().find("\"slices\"") == std::string::npos);
}
