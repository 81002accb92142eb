// Built against an installed tpipe with COMPONENTS nccl: the NCCL tree's headers and libnccl.
#include <tpipe/nccl/communicator.hpp>

#include <cstdio>

int main()
{
    static_assert(tpipe::communicator<tpipe::nccl::communicator>);
    return 0;
}
