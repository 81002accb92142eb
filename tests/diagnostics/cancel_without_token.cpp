// Must not compile: the engine declares itself cancellable but has the members of the seam
// before the stop token (cancel / reset_cancel) instead of reset(std::stop_token). The message
// must name the engine and the member it lacks (tests/CMakeLists.txt checks it).
#include "tpipe/exec/run.hpp"

struct old_cancel_engine : tpipe::cpu_engine {
    static constexpr bool tpipe_cancellable_engine = true;
    old_cancel_engine() : tpipe::cpu_engine(1) {}
    void cancel() noexcept {}
    void reset_cancel() noexcept {}
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
    old_cancel_engine eng;
    tpipe::runner r(pipe, tpipe::program{}, eng);
}
