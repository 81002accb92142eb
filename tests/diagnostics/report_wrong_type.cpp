// Must not compile: the engine declares itself reporting but its waiting_for returns an int. The
// message must name the engine and the signature expected (tests/CMakeLists.txt checks it).
#include "tpipe/exec/run.hpp"

struct int_report_engine : tpipe::cpu_engine {
    static constexpr bool tpipe_reporting_engine = true;
    int_report_engine() : tpipe::cpu_engine(1) {}
    int waiting_for(int) const { return 0; }
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
    int_report_engine eng;
    tpipe::runner r(pipe, tpipe::program{}, eng);
}
