#pragma once
// tpipe::cuda::peer_runtime: the CUDA runtime's peer copier (tpipe::cuda::peer_copier), the
// driver_copier over runtime_driver with the process-wide event pool (cudaMemcpyPeerAsync,
// events as completion markers).
#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/driver_copier.hpp"
#include "tpipe/cuda/peer_link.hpp"
#include "tpipe/cuda/runtime_driver.hpp"

namespace tpipe::cuda {

struct peer_runtime : driver_copier<runtime_driver> {
    peer_runtime() : driver_copier<runtime_driver>(runtime_driver::instance(), default_event_pool()) {}
};
static_assert(peer_copier<peer_runtime>);

} // namespace tpipe::cuda
