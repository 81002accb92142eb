#pragma once
// tpipe::cuda::driver_copier<D>: the peer copier (tpipe::cuda::peer_copier) over a cuda::driver:
// memcpy_peer_async for the copy, a stream marker (tpipe/cuda/stream_markers.hpp: an event of the
// driver's event pool) as its completion marker. The copies between GPUs of one process thus go
// through the engine's driver seam: over the CUDA runtime it is tpipe::cuda::peer_runtime, in the
// CPU tests the engine's test double (tests/cuda/fake_driver.hpp).
#include <cstddef>

#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/stream_markers.hpp"

namespace tpipe::cuda {

template <driver D>
class driver_copier : public stream_markers<D> {
public:
    using typename stream_markers<D>::stream_t;
    using stream_markers<D>::stream_markers;

    //! 0, or the negated driver status of a copy that could not be enqueued.
    int copy_peer(void* dst, int dst_gpu, const void* src, int src_gpu, std::size_t n, stream_t s)
    {
        D& d = this->driver();
        const int rc = d.memcpy_peer_async(dst, dst_gpu, src, src_gpu, n, s);
        if (rc == 0) return 0;
        (void)d.last_error();  // not to be taken later for a failed kernel launch
        return -rc;
    }
};

} // namespace tpipe::cuda
