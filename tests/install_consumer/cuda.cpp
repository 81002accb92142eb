// Built against an installed tpipe with COMPONENTS cuda, by the plain C++ compiler (the CUDA
// tree's headers use the runtime API only); runs anywhere: without a GPU it says why.
#include <tpipe/cuda/availability.hpp>
#include <tpipe/cuda/engine.hpp>

#include <cstdio>

int main()
{
    static_assert(tpipe::engine<tpipe::cuda::engine>);
    if (const auto why = tpipe::cuda::why_no_gpu()) std::printf("no GPU: %s\n", why->c_str());
    return 0;
}
