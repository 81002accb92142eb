// Must not compile: a stage whose gradients() returns int spans. data_parallel could not reduce
// them; it used to skip the stage silently, and the replicas drifted apart. The message must name
// the stage and the member (tests/CMakeLists.txt checks it).
#include <span>

#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/exec/data_parallel.hpp"

struct int_gradients {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
    int backward(const tpipe::unit&, int g) { return g; }
    std::span<int> gradients() { return {}; }
};

int main()
{
    auto pipe = tpipe::pipeline(int_gradients{});
    tpipe::thread_group g(1);
    auto c = g.member(0);
    tpipe::data_parallel<tpipe::thread_communicator> dp(pipe, {&c});
}
