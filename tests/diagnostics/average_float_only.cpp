// Must not compile: the communicator declares that it averages but has all_reduce_average for
// float only. The message must name the communicator and the signature expected
// (tests/CMakeLists.txt checks it).
#include <coroutine>
#include <span>

#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/exec/data_parallel.hpp"

struct float_average_comm : tpipe::thread_communicator {
    static constexpr bool tpipe_averaging_communicator = true;
    explicit float_average_comm(tpipe::thread_communicator c) : tpipe::thread_communicator(std::move(c)) {}
    float_average_comm split(int color, int key) { return float_average_comm(tpipe::thread_communicator::split(color, key)); }
    std::suspend_never all_reduce_average(std::span<float>) { return {}; }
};
struct same {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
    int backward(const tpipe::unit&, int g) { return g; }
};

int main()
{
    auto pipe = tpipe::pipeline(same{});
    tpipe::thread_group g(1);
    float_average_comm c(g.member(0));
    tpipe::data_parallel<float_average_comm> dp(pipe, {&c});
}
