// Must not compile: the transport declares that it connects boundaries inside the process, but
// its connect_local returns a raw pointer. The message must name the transport and the signature
// expected (tests/CMakeLists.txt checks it).
#include "tpipe/exec/run.hpp"

struct raw_pointer_transport : tpipe::local_transport {
    static constexpr bool tpipe_local_connecting_transport = true;
    template <class T>
    using channel_type = tpipe::local_channel<T>;
    template <class T>
    tpipe::local_channel<T>* connect_local(const tpipe::endpoint&)
    {
        return nullptr;
    }
};
struct same {
    using input = int;
    using output = int;
    int forward(const tpipe::unit&, int x) { return x; }
    int backward(const tpipe::unit&, int g) { return g; }
};

int main()
{
    auto pipe = tpipe::pipeline(same{}, same{});
    tpipe::cpu_engine eng(2);
    raw_pointer_transport x;
    tpipe::runner r(pipe, tpipe::program{}, eng, x);
}
