#pragma once
// tpipe::cuda::driver_copier<D>: the peer copier (tpipe::cuda::peer_copier) over a cuda::driver:
// memcpy_peer_async for the copy, an event from the driver's event pool as its completion
// marker. The copies between GPUs of one process thus go through the engine's driver seam: over
// the CUDA runtime it is tpipe::cuda::peer_runtime, in the CPU tests the engine's test double
// (tests/cuda/fake_driver.hpp).
//
// Markers as the copier contract wants them: query() is 0 done, 1 not yet, and a failure as the
// negated driver status (CUDA's codes include 1), which describe_stream() names.
#include <cstddef>
#include <string>

#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"

namespace tpipe::cuda {

template <driver D>
class driver_copier {
public:
    using stream_t = typename D::stream_type;
    struct marker_t {
        typename D::event_type event{};
        int gpu = 0;
    };

    //! Both must outlive the copier and every marker it made.
    driver_copier(D& d, basic_event_pool<D>& events) noexcept : d_(&d), events_(&events) {}

    int copy_peer(void* dst, int dst_gpu, const void* src, int src_gpu, std::size_t n, stream_t s)
    {
        const int rc = d_->memcpy_peer_async(dst, dst_gpu, src, src_gpu, n, s);
        if (rc == 0) return 0;
        (void)d_->last_error();  // not to be taken later for a failed kernel launch
        return -rc;
    }
    //! A marker after the work enqueued on `s` so far (throws cuda_error if it cannot be made).
    marker_t record(stream_t s)
    {
        marker_t m;
        detail::check(*d_, d_->stream_device(s, &m.gpu), "cudaStreamGetDevice", "peer copy marker");
        m.event = events_->acquire(m.gpu);
        if (const int rc = d_->event_record(m.event, s); rc != 0) {
            events_->release(m.gpu, m.event);
            detail::check(*d_, rc, "cudaEventRecord", "peer copy marker");
        }
        return m;
    }
    int query(marker_t m)
    {
        const int rc = d_->event_query(m.event);
        if (rc == 0) return 0;
        if (rc == D::not_ready) return 1;
        (void)d_->last_error();
        return -rc;
    }
    void release(marker_t m) noexcept { events_->release(m.gpu, m.event); }
    std::string describe_stream(int rc) const
    {
        const int e = rc < 0 ? -rc : rc;
        return std::string(d_->error_name(e)) + ": " + d_->error_string(e);
    }

private:
    D* d_;
    basic_event_pool<D>* events_;
};

} // namespace tpipe::cuda
