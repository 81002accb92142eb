// Must not compile: the transport names a channel type but spells connect `conect`. The message
// must name the transport and the signature expected (tests/CMakeLists.txt checks it).
#include "tpipe/exec/run.hpp"

struct misspelled_connect_transport : tpipe::local_transport {
    template <class T>
    using channel_type = tpipe::local_channel<T>;
    template <class T>
    std::unique_ptr<tpipe::local_channel<T>> conect(const tpipe::endpoint&)
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
    misspelled_connect_transport x;
    tpipe::runner r(pipe, tpipe::program{}, eng, x);
}
