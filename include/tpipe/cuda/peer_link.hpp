#pragma once
// tpipe::cuda::basic_peer_link<Copier>: the byte link (tpipe/transport/link.hpp) of one direction
// of a boundary between two ranks of this process on different GPUs. tpipe::linked_channel<T>
// holds both ends over it (channel_end::both); tpipe::cuda::basic_peer_transport opens it.
//
// send() has the channel make the receiving payload at once (link_events::place, on the sending
// thread: device_payload_traits<T>::make(header, pool) with the receiving GPU's pool, which must
// allocate on that GPU and be thread-safe, as tpipe::cuda::memory_pool is), and enqueues the copy
// (cudaMemcpyPeerAsync) on the receiver's transfer stream, then a completion marker. poll()
// reports arrived and sent once the marker completed, so the receiver's compute stream sees the
// bytes and the sender's payload is kept until then; the copy overlaps both GPUs' compute.
// Two ranks on one GPU need no link: their payload moves (basic_peer_transport opens none).
// Errors: a copy that cannot be enqueued or fails on the device throws tpipe::cuda::cuda_error
// naming the tag and both GPUs, from send, or from the waits of both ends.
#include <concepts>
#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/transport/link.hpp"

namespace tpipe::cuda {

//! The calls a peer link makes: an asynchronous copy between GPUs and completion markers
//! (0 done, 1 not yet, else an error describe_stream names). tpipe::cuda::driver_copier makes
//! one of any cuda::driver (tpipe/cuda/driver_copier.hpp); peer_runtime is it over the runtime.
template <class A>
concept peer_copier = std::copy_constructible<A> &&
                      requires(A& a, typename A::stream_t s, typename A::marker_t m, void* dst, const void* src, std::size_t n, int gpu) {
                          { a.copy_peer(dst, gpu, src, gpu, n, s) } -> std::same_as<int>;
                          { a.record(s) } -> std::same_as<typename A::marker_t>;
                          { a.query(m) } -> std::same_as<int>;
                          { a.release(m) } noexcept;
                          { a.describe_stream(0) } -> std::convertible_to<std::string>;
                      };

template <peer_copier Copier>
class basic_peer_link final : public link {
public:
    using stream_t = typename Copier::stream_t;

    //! From a rank on `src_gpu` to one on `dst_gpu` (another GPU), copying on `dst_stream`
    //! into payloads made from `pool` (the receiving rank's).
    basic_peer_link(Copier c, int src_gpu, int dst_gpu, stream_t dst_stream, device_pool_ref pool)
        : copier_(std::move(c)), src_gpu_(src_gpu), dst_gpu_(dst_gpu), stream_(dst_stream), pool_(pool)
    {
        if (src_gpu == dst_gpu)
            throw invalid_argument("peer_link: both ranks are on GPU " + std::to_string(src_gpu) +
                                   "; a payload between them moves, it needs no link");
    }
    basic_peer_link(const basic_peer_link&) = delete;
    basic_peer_link& operator=(const basic_peer_link&) = delete;
    ~basic_peer_link() override { forget(); }

    void send(int tag, std::span<const std::byte> header, std::span<const std::byte> body) override
    {
        if (!events_) throw error(peer() + ": send before a channel attached");
        const std::span<std::byte> to = events_->place(tag, header);
        if (to.size() != body.size())
            throw error("peer_link: the payload of tag " + std::to_string(tag) + " has " + std::to_string(body.size()) +
                        " device bytes, but the one made from its header on GPU " + std::to_string(dst_gpu_) + " has " +
                        std::to_string(to.size()) + " (device_payload_traits::make must reproduce the size)");
        if (!body.empty())
            if (const int rc = copier_.copy_peer(to.data(), dst_gpu_, body.data(), src_gpu_, body.size(), stream_); rc != 0)
                throw cuda_error("peer_link: cudaMemcpyPeerAsync (" + peer() + ", tag " + std::to_string(tag) +
                                     ") failed: " + copier_.describe_stream(rc),
                                 rc, "cudaMemcpyPeerAsync");
        copying_.push_back({tag, copier_.record(stream_)});
    }

    //! The sender places the body (send): nothing to receive.
    void post(int, std::span<std::byte>) override {}

    //! The copies run in order on one stream: the oldest completes (or fails) first, so a failure
    //! is reported for the copy that failed, not for a later one whose marker the stream's error
    //! reached.
    void poll(link_events& events, bool) override
    {
        while (!copying_.empty()) {
            const auto [tag, marker] = copying_.front();
            const int rc = copier_.query(marker);
            if (rc == 1) return;
            copier_.release(marker);
            copying_.pop_front();
            if (rc != 0)
                throw cuda_error("peer_link: the copy of tag " + std::to_string(tag) + " from " + peer() + " failed: " +
                                     copier_.describe_stream(rc),
                                 rc, "cudaMemcpyPeerAsync");
            events.arrived(tag);
            events.sent(tag);
        }
    }

    void reset(int) override { forget(); }
    std::string peer() const override { return "GPU " + std::to_string(src_gpu_) + " to GPU " + std::to_string(dst_gpu_); }
    void attach(link_events* events) override { events_ = events; }
    std::optional<device_pool_ref> device_pool() const override { return pool_; }

private:
    struct copy {
        int tag;
        typename Copier::marker_t marker;
    };

    //! Drops the markers of copies an interrupted iteration left.
    void forget() noexcept
    {
        for (const copy& c : copying_) copier_.release(c.marker);
        copying_.clear();
    }

    Copier copier_;
    int src_gpu_, dst_gpu_;
    stream_t stream_;
    device_pool_ref pool_;
    link_events* events_ = nullptr;
    std::deque<copy> copying_;  //!< in the order they were enqueued
};

} // namespace tpipe::cuda
