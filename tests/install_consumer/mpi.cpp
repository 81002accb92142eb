// Built against an installed tpipe with COMPONENTS mpi: the MPI tree's headers and MPI's C API.
#include <tpipe/mpi/environment.hpp>
#include <tpipe/mpi/transport.hpp>

int main(int argc, char** argv)
{
    // Links MPI; not run by the check (a launcher is needed to run MPI programs everywhere).
    tpipe::mpi::environment env(argc, argv);
    return tpipe::layout::one_rank_per_process(2).processes() == 2 ? 0 : 1;
}
