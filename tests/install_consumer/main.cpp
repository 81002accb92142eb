// Built against an installed tpipe: proves the exported target carries headers and C++20.
#include <tpipe/tpipe.hpp>

int main()
{
    auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{.ranks = 2}, tpipe::microbatches(4));
    return tpipe::valid(prog) ? 0 : 1;
}
