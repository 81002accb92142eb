#include <catch2/catch.hpp>

#include "tpipe/slice/slicers.hpp"

using namespace tpipe;

TEST_CASE("a microbatch slicer splits rows as evenly as possible, larger parts first", "[slice]")
{
    const auto s = microbatch_slicer{3}.scheme(batch_shape{8, 16});
    REQUIRE(s.microbatches() == 3);
    CHECK(s.at(0, 0).rows() == 3);
    CHECK(s.at(1, 0).rows() == 3);
    CHECK(s.at(2, 0).rows() == 2);
    CHECK(s.at(2, 0).row_end == 8);
    CHECK(s.at(1, 0).tokens() == 16);
    CHECK(s.units() == 3);
}

TEST_CASE("a token slicer cuts one microbatch into ascending contiguous slices", "[slice]")
{
    const auto s = token_slicer{{5, 2, 1}}.scheme(batch_shape{2, 8});
    REQUIRE(s.units() == 3);
    CHECK(s.at(1) == unit{0, 1, 0, 2, 5, 7});
    CHECK(s.at(2).context() == 7);
    CHECK(s.shared_cut());
}

TEST_CASE("a grid slicer gives every microbatch the same token cut", "[slice]")
{
    const auto s = grid_slicer{2, {3, 1}}.scheme(batch_shape{4, 4});
    REQUIRE(s.units() == 4);
    for (int i = 0; i < s.units(); ++i) CHECK(s.index(s.at(i).microbatch, s.at(i).slice) == i);
    CHECK(s.at(3) == unit{1, 1, 2, 4, 3, 4});
    CHECK(uniform_grid_slicer{2, 4}.scheme(batch_shape{2, 8}).at(1, 3).token_begin == 6);
}

TEST_CASE("slicers refuse shapes they cannot cut, saying what would work", "[slice]")
{
    CHECK_THROWS_WITH((microbatch_slicer{5}.scheme(batch_shape{4, 8})), Catch::Contains("use at most 4"));
    CHECK_THROWS_WITH((token_slicer{{3, 3}}.scheme(batch_shape{1, 8})), Catch::Contains("sum to 6"));
    CHECK_THROWS_WITH((token_slicer{{0, 8}}.scheme(batch_shape{1, 8})), Catch::Contains(">= 1"));
    CHECK_THROWS_WITH((uniform_grid_slicer{1, 3}.scheme(batch_shape{1, 8})), Catch::Contains("dividing"));
    CHECK_THROWS_AS(microbatches(0), invalid_argument);
    CHECK_THROWS_AS((scheme({scheme::microbatch{0, 1, {0, 2, 2}}})), invalid_argument);
}
