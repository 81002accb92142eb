// The re-plan record survives its own JSON line, and the line has the keys training and
// planning both log.
#include <catch2/catch.hpp>

#include "tpipe/elastic/replan.hpp"

TEST_CASE("replan record round-trips through one JSON line")
{
    tpipe::elastic::replan_record r{3, 7, 4, 4, 16, {0, 5, 9, 13, 17}, true, 1234.5, std::nullopt, {}};
    const auto line = r.to_json_line();
    CHECK(line.find('\n') == std::string::npos);
    const auto v = tpipe::json::parse(line);
    for (const char* k : {"epoch", "frozen", "stages", "replicas", "microbatches", "predicted_throughput",
                          "measured_throughput", "cuts", "cached"})
        CHECK(v.contains(k));
    CHECK(v.at("measured_throughput").is_null());
    CHECK(tpipe::elastic::replan_record::from_json(v) == r);
    r.measured_throughput = 1000.25;
    CHECK(tpipe::elastic::replan_record::from_json(tpipe::json::parse(r.to_json_line())) == r);
    CHECK_THROWS_AS(tpipe::elastic::replan_record::from_json(tpipe::json::parse(R"({"epoch": 1})")), tpipe::parse_error);
}
