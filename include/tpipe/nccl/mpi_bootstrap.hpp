#pragma once
// tpipe::nccl::exchange_through_mpi: hands `root`'s ncclUniqueId to every process of an MPI
// communicator (a broadcast of its 128 bytes; collective). Needs tpipe::mpi (TPIPE_ENABLE_MPI).
// Under the environment's set-up bound (environment_options::watchdog) the broadcast is
// nonblocking and polled against it, as tpipe's other set-up collectives are: a process that
// never arrives is named instead of hanging the others (tpipe/mpi/setup_watch.hpp).
//
//   tpipe::mpi::environment env(argc, argv);
//   auto id = tpipe::nccl::exchange_through_mpi(MPI_COMM_WORLD, tpipe::nccl::runtime_api::make_unique_id);
//   auto world = tpipe::nccl::communicator::init({}, size, id, rank, tpipe::mpi::setup_bound{});  // bounded too
#include <mpi.h>

#include <memory>

#include "tpipe/exec/errors.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/setup_watch.hpp"
#include "tpipe/nccl/api.hpp"

namespace tpipe::nccl {

//! The root calls make(); every process returns the root's id.
template <class Make>
unique_id exchange_through_mpi(MPI_Comm comm, Make&& make, int root = 0)
{
    constexpr const char* what = "tpipe::nccl::exchange_through_mpi (MPI_Ibcast of the ncclUniqueId)";
    int me = 0;
    mpi::check(MPI_Comm_rank(comm, &me), "MPI_Comm_rank");
    auto id = std::make_unique<unique_id>();  // MPI writes it until the broadcast completes
    if (me == root) *id = make();
    MPI_Request req = MPI_REQUEST_NULL;
    mpi::check(MPI_Ibcast(id->bytes.data(), static_cast<int>(id->bytes.size()), MPI_BYTE, root, comm, &req), what);
    try {
        mpi::detail::setup_wait(req, what);
    } catch (const watchdog_error&) {
        mpi::detail::keep_abandoned(std::move(id));  // abandoned: MPI may still write it
        throw;
    }
    return *id;
}

} // namespace tpipe::nccl
