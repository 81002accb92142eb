// Must not compile: a stage with backward_input but no backward_weight. It used to fall back to
// backward() silently (a zero-bubble schedule lost its overlap). The message must name the stage
// and the missing member (tests/CMakeLists.txt checks it).
#include <vector>

#include "tpipe/exec/pipeline.hpp"

struct half_split {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
    int backward(const tpipe::unit&, int g) { return g; }
    int backward_input(const tpipe::unit&, int g) { return g; }
};

int main() { tpipe::uniform_pipeline<half_split> p(std::vector<half_split>(2)); }
