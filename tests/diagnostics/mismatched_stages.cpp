// Must not compile: the second stage takes a double, the first makes an int. The compiler's
// message must name both types (tests/CMakeLists.txt checks it).
#include "tpipe/exec/pipeline.hpp"

struct makes_int {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
    int backward(const tpipe::unit&, int g) { return g; }
};
struct takes_double {
    using input = double;
    using output = double;
    double forward(const tpipe::unit&, double x) { return x; }
    double backward(const tpipe::unit&, double g) { return g; }
};

int main() { auto p = tpipe::pipeline(makes_int{}, takes_double{}); }
