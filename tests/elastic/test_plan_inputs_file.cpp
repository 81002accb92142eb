// The planner's inputs recorded by one run and replayed by another: the times come back bit for
// bit, so the replaying run plans every interval as the recording run did; a file that does not
// fit the run is refused with a sentence naming it.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "tpipe/core/file.hpp"
#include "tpipe/elastic/plan_inputs_file.hpp"
#include "tpipe/elastic/shape_planner.hpp"
#include "rows_free_unit.hpp"

namespace {

namespace el = tpipe::elastic;

//! Times a clock could give: irregular doubles whose last bits matter.
el::driver_options measured_options(int units)
{
    el::driver_options o;
    o.devices = 4;
    o.batch = 8;
    o.seq_len = 16;
    for (int u = 0; u < units; ++u) {
        o.measured.forward.push_back(1e-3 * std::sqrt(2.0 + u) / 3.0);
        o.measured.backward.push_back(2e-3 * std::cbrt(5.0 + u * u) / 7.0);
    }
    return o;
}

std::string temp_file(const char* name)
{
    return (std::filesystem::temp_directory_path() / (std::string("tpipe-plan-inputs-") + name)).string();
}

std::vector<el::replan_record> plans_of(const el::driver_options& o, int units)
{
    const el::shape_planner p(std::vector<double>(static_cast<std::size_t>(units), 1.0), units - 1, o);
    std::vector<el::replan_record> all{p.initial().record(0, true)};
    for (int frozen = 1; frozen < units; ++frozen) all.push_back(p.replan(frozen, all.back().stages).record(frozen, true));
    return all;
}

} // namespace

TEST_CASE("plan inputs: replayed bit for bit, the same plans", "[elastic][plan-inputs]")
{
    const int units = 6;
    auto o = measured_options(units);
    const auto path = temp_file("plain.json");
    el::record_plan_inputs(path, o);

    el::driver_options replayed = o;
    replayed.measured = {};
    el::replay_plan_inputs(path, replayed, units, 0);
    REQUIRE(replayed.measured.forward == o.measured.forward);  // == on doubles: every bit
    REQUIRE(replayed.measured.backward == o.measured.backward);
    REQUIRE_FALSE(replayed.slicing.has_value());
    REQUIRE(plans_of(replayed, units) == plans_of(o, units));

    // The times decide the plan: the same options measured otherwise plan otherwise (what a
    // replay protects a run from).
    auto other = o;
    other.measured.forward.back() *= 40;
    other.measured.backward.back() *= 40;
    REQUIRE(plans_of(other, units) != plans_of(o, units));
    REQUIRE(replayed.measured.update.empty());  // not measured: not recorded, not invented

    // The optimizer's seconds, when measured, come back too (the interval forecast prices them).
    for (int u = 0; u < units; ++u) o.measured.update.push_back(3e-4 * std::sqrt(7.0 + u) / 11.0);
    el::record_plan_inputs(path, o);
    el::replay_plan_inputs(path, replayed, units, 0);
    REQUIRE(replayed.measured.update == o.measured.update);
    REQUIRE(replayed.measured.reduce.empty());
    for (int u = 0; u < units; ++u) o.measured.reduce.push_back(2e-5 * std::sqrt(3.0 + u) / 7.0);
    el::record_plan_inputs(path, o);
    el::replay_plan_inputs(path, replayed, units, 0);
    REQUIRE(replayed.measured.reduce == o.measured.reduce);
    REQUIRE(replayed.measured.forward_fixed.empty());
    // So do the fixed microbatch times, which change the plans (a microbatch costs more).
    for (int u = 0; u < units; ++u) {
        o.measured.forward_fixed.push_back(1e-3 * std::sqrt(5.0 + u) / 3.0);
        o.measured.backward_fixed.push_back(2e-3 * std::sqrt(2.0 + u) / 3.0);
    }
    el::record_plan_inputs(path, o);
    el::replay_plan_inputs(path, replayed, units, 0);
    REQUIRE(replayed.measured.forward_fixed == o.measured.forward_fixed);
    REQUIRE(replayed.measured.backward_fixed == o.measured.backward_fixed);
    REQUIRE(plans_of(replayed, units) == plans_of(o, units));
    o.measured.update.pop_back();
    el::record_plan_inputs(path, o);
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, replayed, units, 0),
                        Catch::Contains("unit_seconds.update has 5 unit times; this model has 6 units"));
    std::filesystem::remove(path);
}

TEST_CASE("plan inputs: token latency tables replayed with the unit times", "[elastic][plan-inputs]")
{
    const int units = 3;
    auto o = measured_options(units);
    o.slicing = el::token_slicing{{tpipe_test::rows_free_unit(), tpipe_test::rows_free_unit(), tpipe_test::rows_free_unit()}, 4};
    const auto path = temp_file("sliced.json");
    el::record_plan_inputs(path, o);
    el::driver_options replayed;
    el::replay_plan_inputs(path, replayed, units, 4);
    REQUIRE(replayed.slicing.has_value());
    REQUIRE(replayed.slicing->granularity == 4);
    REQUIRE(replayed.slicing->units.size() == 3);
    for (std::size_t u = 0; u < 3; ++u) REQUIRE(replayed.slicing->units[u].samples() == o.slicing->units[u].samples());

    // Tables the run would not use, or another granularity, are refused: never silently dropped.
    el::driver_options x;
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0),
                        Catch::Contains("sliced.json") && Catch::Contains("holds token latency tables") &&
                            Catch::Contains("this run does not slice tokens"));
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 2),
                        Catch::Contains("profiled for granularity 4; this run slices with granularity 2"));
    std::filesystem::remove(path);
}

TEST_CASE("plan inputs: a file that does not fit the run is refused, naming it", "[elastic][plan-inputs]")
{
    const int units = 4;
    const auto o = measured_options(units);
    const auto path = temp_file("refused.json");
    el::record_plan_inputs(path, o);
    el::driver_options x;
    REQUIRE_THROWS_AS(el::replay_plan_inputs(path, x, 5, 0), tpipe::invalid_argument);
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, 5, 0),
                        Catch::Contains("refused.json") && Catch::Contains("has 4 unit times; this model has 5 units"));
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 8),
                        Catch::Contains("holds no token latency tables") && Catch::Contains("granularity 8"));
    REQUIRE(x.measured.forward.empty());  // a refused file leaves the options as they were

    const auto text = tpipe::read_file(path, "test");
    auto write = [&](const std::string& t) { tpipe::write_file(path, t); };
    write(text.substr(0, text.size() / 2));
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0), Catch::Contains("is not JSON"));
    write(R"({"format": "something-else", "version": 1})");
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0), Catch::Contains("not a plan inputs file"));
    write(R"({"format": "tpipe-elastic-plan-inputs", "version": 2})");
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0), Catch::Contains("version 2 of the plan inputs format"));
    write(R"({"format": "tpipe-elastic-plan-inputs", "version": 1, "unit_seconds": {"forward": [1, 1, -1, 1], "backward": [1, 1, 1, 1]}})");
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0),
                        Catch::Contains("unit_seconds.forward holds -1; unit times must be finite and >= 0"));
    write(R"({"format": "tpipe-elastic-plan-inputs", "version": 1, "unit_seconds": {"forward": [1, 1, 1, 1]}})");
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0),
                        Catch::Contains("cannot be read as plan inputs") && Catch::Contains("\"backward\""));
    std::filesystem::remove(path);
    REQUIRE_THROWS_WITH(el::replay_plan_inputs(path, x, units, 0), Catch::Contains("does not exist"));

    el::driver_options unmeasured;
    REQUIRE_THROWS_WITH(el::record_plan_inputs(path, unmeasured), Catch::Contains("measure every unit before recording"));
}
