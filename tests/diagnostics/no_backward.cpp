// Must not compile: the stage has no backward. The message must name the missing member.
#include "tpipe/exec/pipeline.hpp"

struct forward_only {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
};

int main() { auto p = tpipe::pipeline(forward_only{}); }
