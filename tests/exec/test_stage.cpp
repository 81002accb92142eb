#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "tpipe/exec/stage.hpp"

namespace {
struct plain {
    using input = std::vector<int>;
    using output = std::vector<double>;
    output forward(const tpipe::unit&, input) { return {}; }
    input backward(const tpipe::unit&, output) { return {}; }
};
struct split : plain {
    input backward_input(const tpipe::unit&, output) { return {}; }
    void backward_weight(const tpipe::unit&) {}
};
struct no_types {
    int forward(const tpipe::unit&, int) { return 0; }
    int backward(const tpipe::unit&, int) { return 0; }
};
struct wrong_backward {
    using input = int;
    using output = double;
    double forward(const tpipe::unit&, int) { return 0; }
    double backward(const tpipe::unit&, double) { return 0; }  // must return the input type
};
struct move_only {
    std::unique_ptr<int> p;
};
struct move_only_stage {
    using input = move_only;
    using output = move_only;
    move_only forward(const tpipe::unit&, move_only x) { return x; }
    move_only backward(const tpipe::unit&, move_only g) { return g; }
};
} // namespace

TEST_CASE("the stage concept accepts forward/backward stages and refuses malformed ones", "[exec][stage]")
{
    STATIC_REQUIRE(tpipe::stage<plain>);
    STATIC_REQUIRE_FALSE(tpipe::split_backward_stage<plain>);
    STATIC_REQUIRE(tpipe::stage<split>);
    STATIC_REQUIRE(tpipe::split_backward_stage<split>);
    STATIC_REQUIRE_FALSE(tpipe::stage<no_types>);
    STATIC_REQUIRE_FALSE(tpipe::stage<wrong_backward>);
    STATIC_REQUIRE(tpipe::stage<move_only_stage>);
    STATIC_REQUIRE(tpipe::stage<std::reference_wrapper<plain>>);
    STATIC_REQUIRE(std::is_same_v<tpipe::stage_input_t<std::reference_wrapper<split>>, std::vector<int>>);
}
