#include <catch2/catch.hpp>

#include "tpipe/schedule/action.hpp"

using namespace tpipe;

TEST_CASE("action strings follow PyTorch's form plus a token-slice field", "[schedule][action]")
{
    CHECK(to_string(action{2, op::F, 0, 0}) == "2F0");
    CHECK(to_string(action{1, op::SEND_F, 1, 0}) == "1SEND_F1");
    CHECK(to_string(action{0, op::I, 12, 3}) == "0I12.3");
    for (int k = 0; k < 8; ++k) {
        const action a{13, static_cast<op>(k), 7, k % 3};
        CHECK(parse_action(to_string(a)) == a);
    }
    STATIC_REQUIRE(parse_action("3RECV_B10.2") == action{3, op::RECV_B, 10, 2});
}

TEST_CASE("malformed action strings are refused with the expected form", "[schedule][action]")
{
    CHECK_THROWS_WITH(parse_action("F0"), Catch::Contains("expected a number"));
    CHECK_THROWS_WITH(parse_action("2X0"), Catch::Contains("unknown kind"));
    CHECK_THROWS_WITH(parse_action("2F0x"), Catch::Contains("trailing"));
    CHECK_THROWS_AS(parse_action("2F"), parse_error);
    CHECK_THROWS_AS(parse_action("2F1."), parse_error);
}
