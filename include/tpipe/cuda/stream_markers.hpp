#pragma once
// tpipe::cuda::stream_markers<D>: completion markers on the streams of a cuda::driver, for code
// that polls for its work itself (the peer links, NCCL's links) rather than awaiting it.
// A marker is an event of the driver's event pool recorded on the stream; query() is 0 done,
// 1 not yet, and a failure as the negated driver status (CUDA's codes include 1, so a failure is
// never mistaken for "not yet"), which describe_stream() names.
#include <string>

#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"

namespace tpipe::cuda {

template <driver D>
class stream_markers {
public:
    using driver_type = D;
    using stream_t = typename D::stream_type;
    struct marker_t {
        typename D::event_type event{};
        int gpu = 0;
    };

    //! Bound to nothing: assign a bound one before use.
    stream_markers() = default;
    //! Both must outlive these markers and every marker they made.
    stream_markers(D& d, basic_event_pool<D>& events) noexcept : d_(&d), events_(&events) {}

    //! A marker after the work enqueued on `s` so far (throws cuda_error if it cannot be made).
    marker_t record(stream_t s)
    {
        marker_t m;
        detail::check(*d_, d_->stream_device(s, &m.gpu), "cudaStreamGetDevice", "stream marker");
        m.event = events_->acquire(m.gpu);
        if (const int rc = d_->event_record(m.event, s); rc != 0) {
            events_->release(m.gpu, m.event);
            detail::check(*d_, rc, "cudaEventRecord", "stream marker");
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

    D& driver() const noexcept { return *d_; }
    basic_event_pool<D>& events() const noexcept { return *events_; }

private:
    D* d_ = nullptr;
    basic_event_pool<D>* events_ = nullptr;
};

} // namespace tpipe::cuda
