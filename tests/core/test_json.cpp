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

TEST_CASE("only RFC 8259 numbers are numbers", "[core][json]")
{
    for (const char* ok : {"0", "-0", "12", "-3.25", "1e5", "1E+5", "2.5e-3", "0.5"}) {
        INFO(ok);
        CHECK(json::parse(ok).as_number() == std::stod(ok));
    }
    CHECK_THROWS_WITH(json::parse("+1e-3"), Catch::Contains("cannot start with '+'"));
    CHECK_THROWS_WITH(json::parse("0001e-3"), Catch::Contains("leading zero"));
    CHECK_THROWS_WITH(json::parse("-01"), Catch::Contains("leading zero"));
    for (const char* bad : {"1.", ".5", "1e", "1e+", "-", "--1", "1.5e3.2", "0x10", "Infinity", "NaN"}) {
        INFO(bad);
        CHECK_THROWS_AS(json::parse(bad), parse_error);
    }
    CHECK_THROWS_WITH(json::parse("[1e400]"), Catch::Contains("does not fit a double") && Catch::Contains("column 2"));
}

TEST_CASE("JSON objects refuse duplicate keys, naming the key and where", "[core][json]")
{
    CHECK_THROWS_WITH(json::parse(R"({"a": 1, "a": 2})"), Catch::Contains("duplicate key \"a\"") && Catch::Contains("column 10"));
    CHECK(json::parse(R"({"a": 1, "b": {"a": 2}})").at("b").at("a").as_number() == 2);
}

TEST_CASE("JSON strings: strict escapes, surrogate pairs, UTF-8 in and out", "[core][json]")
{
    CHECK(json::parse(R"("\u00e9\u20ac")").as_string() == "\xc3\xa9\xe2\x82\xac");
    CHECK(json::parse(R"("\ud83d\ude00")").as_string() == "\xf0\x9f\x98\x80");  // U+1F600 from its pair
    CHECK(json::parse(R"("\u0041\/")").as_string() == "A/");
    CHECK_THROWS_WITH(json::parse(R"("\uZZZZ")"), Catch::Contains("4 hex digits"));
    CHECK_THROWS_WITH(json::parse(R"("\u12")"), Catch::Contains("4 hex digits"));
    CHECK_THROWS_WITH(json::parse(R"("\ud83d")"), Catch::Contains("high surrogate"));
    CHECK_THROWS_WITH(json::parse(R"("\ud83d\u0041")"), Catch::Contains("high surrogate"));
    CHECK_THROWS_WITH(json::parse(R"("\ude00")"), Catch::Contains("lone low surrogate"));
    CHECK_THROWS_WITH(json::parse(R"("\x")"), Catch::Contains("unknown escape"));
    CHECK_THROWS_WITH(json::parse("\"a\nb\""), Catch::Contains("control character"));
    CHECK_THROWS_WITH(json::parse("\"\xff\""), Catch::Contains("invalid UTF-8"));
    CHECK_THROWS_WITH(json::parse("\"\xc0\xaf\""), Catch::Contains("invalid UTF-8"));      // overlong '/'
    CHECK_THROWS_WITH(json::parse("\"\xed\xa0\x80\""), Catch::Contains("invalid UTF-8"));  // a surrogate as UTF-8
    // Output is JSON even when a string holds bytes that are not UTF-8: they become U+FFFD.
    CHECK(json::dump(json::value(std::string("a\xff" "b\xc3\xa9"))) == "\"a\\ufffdb\xc3\xa9\"");
    CHECK(json::parse(json::dump(json::value(std::string("\x01\xe2\x82")))).as_string() == "\x01\xef\xbf\xbd\xef\xbf\xbd");
}

TEST_CASE("every malformed document throws tpipe::parse_error, never another exception", "[core][json]")
{
    for (const char* bad : {"", "[", "{", "{\"a\"", "{\"a\":", "[1,]", "{,}", "\"", "\"\\", "\"\\u", "tru", "nul",
                            "[1 2]", "{\"a\" 1}", "{1: 2}"}) {
        INFO(bad);
        CHECK_THROWS_AS(json::parse(bad), parse_error);
    }
    CHECK_THROWS_WITH(json::parse(std::string(300, '[')), Catch::Contains("nesting too deep"));
}
