// Must not compile: the communicator declares that it cancels its group but its cancel_group is
// not noexcept. The message must name the communicator and the signature expected
// (tests/CMakeLists.txt checks it).
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/exec/data_parallel.hpp"

struct throwing_group_comm : tpipe::thread_communicator {
    static constexpr bool tpipe_group_cancelling_communicator = true;
    explicit throwing_group_comm(tpipe::thread_communicator c) : tpipe::thread_communicator(std::move(c)) {}
    throwing_group_comm split(int color, int key) { return throwing_group_comm(tpipe::thread_communicator::split(color, key)); }
    void cancel_group() {}
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
    throwing_group_comm c(g.member(0));
    tpipe::data_parallel<throwing_group_comm> dp(pipe, {&c});
}
