#pragma once
// tpipe::nccl::transport<Pool>: the tpipe::link_transport over NCCL between processes, with
// tpipe::mpi::transport as its control plane (basic_transport's semantics:
// tpipe/nccl/basic_transport.hpp). Needs tpipe::mpi (TPIPE_ENABLE_MPI) as well as tpipe::nccl.
//
//   tpipe::mpi::environment env(argc, argv);
//   const auto l = tpipe::layout::one_rank_per_process(P);
//   cudaSetDevice(local_gpu);
//   tpipe::mpi::transport control(l, 0);
//   const auto id = tpipe::nccl::exchange_through_mpi(MPI_COMM_WORLD, tpipe::nccl::runtime_api::make_unique_id);
//   tpipe::nccl::transport<my_pool> x({}, id, control, pool);   // collective
#include "tpipe/cuda/memory_pool.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/mpi/transport.hpp"
#include "tpipe/nccl/basic_transport.hpp"
#include "tpipe/nccl/runtime_api.hpp"

namespace tpipe::nccl {

static_assert(transport_control<mpi::transport>);
// Its set-up calls (ncclCommInitRank, ncclCommSplit) run under the environment's set-up bound, as
// communicator::init's do given tpipe::mpi::setup_bound{}.
static_assert(bounds_setup<mpi::transport> && bounds_setup<mpi::setup_bound>);

template <cuda::payload_pool Pool>
using transport = basic_transport<runtime_api, mpi::transport, Pool>;
static_assert(tpipe::transport<transport<cuda::memory_pool>>);
static_assert(!tpipe::transport_for<transport<cuda::memory_pool>, int>);  // no device form: refused between processes

} // namespace tpipe::nccl
