#pragma once
// tpipe::nccl::exchange_through_mpi: hands `root`'s ncclUniqueId to every process of an MPI
// communicator (MPI_Bcast of its 128 bytes; collective). Needs tpipe::mpi (TPIPE_ENABLE_MPI).
//
//   tpipe::mpi::environment env(argc, argv);
//   auto id = tpipe::nccl::exchange_through_mpi(MPI_COMM_WORLD, tpipe::nccl::runtime_api::make_unique_id);
//   auto world = tpipe::nccl::communicator::init(size, id, rank);
#include <mpi.h>

#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/nccl/api.hpp"

namespace tpipe::nccl {

//! The root calls make(); every process returns the root's id.
template <class Make>
unique_id exchange_through_mpi(MPI_Comm comm, Make&& make, int root = 0)
{
    int me = 0;
    mpi::check(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
    unique_id id;
    if (me == root) id = make();
    mpi::check(MPI_Bcast(id.bytes.data(), static_cast<int>(id.bytes.size()), MPI_BYTE, root, comm), "MPI_Bcast (ncclUniqueId)");
    return id;
}

} // namespace tpipe::nccl
