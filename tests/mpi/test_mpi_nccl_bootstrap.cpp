// tpipe::nccl::exchange_through_mpi under mpiexec: the NCCL unique id made on the root reaches
// every process (no NCCL needed: the id is bytes, and make() is the caller's).
#include <catch2/catch.hpp>

#include <cstddef>

#include "mpi_suite.hpp"
#include "tpipe/nccl/mpi_bootstrap.hpp"

namespace {
tpipe::nccl::unique_id pattern(int seed)
{
    tpipe::nccl::unique_id id;
    for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = std::byte(static_cast<unsigned char>(seed * 31 + i));
    return id;
}
} // namespace

TEST_CASE("nccl bootstrap over MPI: every process gets the root's id, made on the root only", "[mpi][nccl]")
{
    int me = 0, n = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int root : {0, n - 1}) {
        int made = 0;
        const auto id = tpipe::nccl::exchange_through_mpi(
            MPI_COMM_WORLD,
            [&] {
                ++made;
                return pattern(root + 1);
            },
            root);
        CHECK(tpipe_test::every_process(id == pattern(root + 1)));
        CHECK(tpipe_test::every_process(made == (me == root ? 1 : 0)));
    }
}
