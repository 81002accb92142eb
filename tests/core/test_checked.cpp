#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>

#include "tpipe/core/checked.hpp"

using namespace tpipe;

TEST_CASE("parse_integer reads the whole text inside the range, never wrapping", "[core][checked]")
{
    CHECK(parse_integer<int>("--stages", "4", 1, 64) == 4);
    CHECK(parse_integer<int>("--x", "-7") == -7);
    CHECK(parse_integer<std::int64_t>("--n", "9223372036854775807") == std::numeric_limits<std::int64_t>::max());
    CHECK(parse_integer<std::uint64_t>("--seed", "18446744073709551615") == std::numeric_limits<std::uint64_t>::max());
    // 2^32 + 1 would be 1 after a narrowing cast.
    CHECK_THROWS_WITH(parse_integer<int>("--layers", "4294967297", 1),
                      "--layers must be an integer in 1..2147483647, got '4294967297'");
    CHECK_THROWS_WITH(parse_integer<int>("--stages", "0", 1, 64), "--stages must be an integer in 1..64, got '0'");
    CHECK_THROWS_WITH(parse_integer<unsigned>("--n", "-1"), Catch::Contains("in 0..4294967295"));
    CHECK_THROWS_WITH(parse_integer<std::int64_t>("--n", "99999999999999999999"), Catch::Contains("got '99999999999999999999'"));
    for (const char* bad : {"", " 1", "1 ", "1.0", "1e3", "+1", "0x10", "4x", "--1"}) {
        INFO(bad);
        CHECK_THROWS_AS(parse_integer<int>("--n", bad), invalid_argument);
    }
}

TEST_CASE("parse_finite refuses inf, nan, overflow and the out-of-range", "[core][checked]")
{
    CHECK(parse_finite("--f", "1.5") == 1.5);
    CHECK(parse_finite("--f", "+2e-3", 0) == 2e-3);
    CHECK(parse_finite("--f", "1e308") == 1e308);
    for (const char* bad : {"inf", "-inf", "nan", "1e309", "", "1,5", "x", "1.5s"}) {
        INFO(bad);
        CHECK_THROWS_AS(parse_finite("--f", bad), invalid_argument);
    }
    CHECK_THROWS_WITH(parse_finite("--f", "inf", 0), "--f must be a finite number >= 0, got 'inf'");
    CHECK_THROWS_WITH(parse_finite("--f", "-1", 0, 10), "--f must be a finite number in 0..10, got '-1'");
    CHECK_THROWS_WITH(checked_finite("cost", std::numeric_limits<double>::quiet_NaN()), Catch::Contains("got 'nan'"));
}

TEST_CASE("checked_integer converts a double only when it names one integer in range", "[core][checked]")
{
    CHECK(checked_integer<int>("tensor_parallel", 8.0, 1) == 8);
    CHECK_THROWS_WITH(checked_integer<int>("tensor_parallel", 4294967304.0, 1),
                      "tensor_parallel must be an integer in 1..2147483647, got '4294967304'");
    CHECK_THROWS_AS(checked_integer<int>("x", 2.5), invalid_argument);
    CHECK_THROWS_AS(checked_integer<int>("x", std::numeric_limits<double>::infinity()), invalid_argument);
    CHECK_THROWS_AS(checked_integer<std::int64_t>("x", 1e300), invalid_argument);  // UB as a plain cast
    CHECK_THROWS_AS(checked_integer<std::int64_t>("x", 9007199254740993.0), invalid_argument);
    CHECK(checked_narrow<int>("n", std::int64_t{42}) == 42);
    CHECK_THROWS_WITH(checked_narrow<int>("n", std::int64_t{1} << 40), Catch::Contains("got '1099511627776'"));
    CHECK_THROWS_AS(checked_narrow<std::size_t>("n", -1), invalid_argument);
}
