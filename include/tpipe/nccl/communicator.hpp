#pragma once
// tpipe::nccl::communicator: tpipe::communicator over NCCL on GPUs (the semantics are
// basic_communicator's: tpipe/nccl/basic_communicator.hpp). Spans are device memory.
//
//   cudaSetDevice(gpu);
//   auto id = tpipe::nccl::exchange_through_file(path, rank, tpipe::nccl::runtime_api::make_unique_id);
//   auto world = tpipe::nccl::communicator::init({}, size, id, rank);
#include "tpipe/nccl/basic_communicator.hpp"
#include "tpipe/nccl/runtime_api.hpp"

namespace tpipe::nccl {

using communicator = basic_communicator<runtime_api>;
static_assert(tpipe::communicator<communicator>);
static_assert(tpipe::averaging_communicator<communicator>);

} // namespace tpipe::nccl
