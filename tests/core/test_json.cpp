#include <catch2/catch.hpp>

#include "tpipe/core/json.hpp"

using namespace tpipe;

TEST_CASE("JSON documents survive a parse and dump round trip", "[core][json]")
{
    const std::string text = R"({"a":[1,2.5,-3e-07,true,false,null],"b":{"c":"x\"y\\z\n"},"d":[]})";
    const auto v = json::parse(text);
    CHECK(v.at("a").as_array().size() == 6);
    CHECK(v.at("a").as_array()[1].as_number() == 2.5);
    CHECK(v.at("a").as_array()[2].as_number() == Approx(-3e-7));
    CHECK(v.at("b").at("c").as_string() == "x\"y\\z\n");
    CHECK(json::parse(json::dump(v)).at("b").at("c").as_string() == "x\"y\\z\n");
    CHECK(json::dump(json::parse(json::dump(v))) == json::dump(v));
}

TEST_CASE("malformed JSON is refused with its position", "[core][json]")
{
    CHECK_THROWS_WITH(json::parse("{\"a\": }"), Catch::Contains("line 1 column 7"));
    CHECK_THROWS_AS(json::parse("[1, 2"), parse_error);
    CHECK_THROWS_AS(json::parse("{\"a\": 1} x"), parse_error);
    CHECK_THROWS_AS(json::parse("1.2.3"), parse_error);
    CHECK_THROWS_WITH(json::parse("{}").at("kind"), Catch::Contains("\"kind\""));
    CHECK_THROWS_WITH(json::parse("[1]").as_object("model file"), Catch::Contains("model file must be an object"));
}
