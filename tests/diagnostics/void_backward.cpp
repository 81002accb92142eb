// Must not compile: a uniform_pipeline stage whose backward returns void. The message must be the
// sentence naming the member, with no error about the use of the type after it.
#include "tpipe/exec/pipeline.hpp"
#include <vector>
struct void_back {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
    void backward(const tpipe::unit&, int) {}
};
int main() { tpipe::uniform_pipeline<void_back> p(std::vector<void_back>(2)); }
