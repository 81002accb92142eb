#pragma once
// tpipe::nccl::basic_link<Api>: the byte link (tpipe/transport/link.hpp) of one direction of one
// boundary between this process and another over NCCL, for bodies in device memory. Made by
// tpipe::nccl::basic_transport; tpipe::linked_channel<T> is the typed channel over it, as over MPI
// and UCX, and makes received payloads with tpipe::device_payload_traits<T>::make(header, pool)
// from the transport's pool (device_pool()).
//
// Sending: send(tag, header, body) issues, on the direction's transfer stream, the copy of the
// envelope (channel, tag, header, body size: detail/receive_lane.hpp) to device memory and one
// NCCL group of two sends, the envelope and the body; it never waits. The body was made by the
// sender's compute, whose completion the runner awaited before the SEND, so the transfer stream
// may read it. poll reports sent(tag) once that group has completed.
// Receiving: NCCL has no tags, so every link that receives from one peer shares that peer's
// receive lane (one order of messages), and a poll of one link may place a payload of another:
// the links of a transport share its lock (shared_lock()) and report to each channel's events
// (attach). post(tag) only notes the receive; a receive is posted only while a loop waits
// (poll's `waiting`), envelope then body, in the sender's order.
//
// Errors: poll also polls ncclCommGetAsyncError while a loop waits; on an error the transport's
// communicators are aborted and the waits throw tpipe::nccl::nccl_error. An NCCL transfer left
// half done cannot be taken back, so a link destroyed (or reset) with transfers in flight
// aborts the communicators, and the runner refuses to run again over them (as over MPI).
#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/detail/receive_lane.hpp"
#include "tpipe/nccl/detail/transport_core.hpp"
#include "tpipe/nccl/nccl_error.hpp"
#include "tpipe/transport/device_payload_traits.hpp"
#include "tpipe/transport/link.hpp"

namespace tpipe::nccl {

template <api Api>
class basic_link final : public tpipe::link, private detail::lane_sink {
public:
    //! One direction of one boundary (key = 2 * boundary + (forward ? 0 : 1)) with process
    //! `peer`; receivers make payloads from `pool`. Made under the transport's lock.
    basic_link(detail::transport_core<Api>& core, device_pool_ref pool, int peer, int key, bool sending)
        : core_(core), pool_(pool), peer_(peer), key_(key), sending_(sending), dir_(core.towards(peer, sending))
    {
        if (!sending_) {
            lane_ = &core_.lane(peer_);
            lane_->attach(key_, this);
        }
    }
    basic_link(const basic_link&) = delete;
    basic_link& operator=(const basic_link&) = delete;
    //! Under the transport's lock (the channel's).
    ~basic_link() override
    {
        if (lane_) {
            if (lane_->busy()) core_.poisoned = true;  // the lane may be receiving into one of our payloads
            lane_->detach(key_);
        }
        if (!pending_sends_.empty()) core_.poisoned = true;  // the communicator may still read them
        if (core_.poisoned) {  // before the buffers go, the work that may still touch them ends
            core_.abort();
            core_.quiesce();
        }
        release_markers();
        free_envelopes();
    }

    void send(int tag, std::span<const std::byte> header, std::span<const std::byte> body) override
    {
        core_.rethrow_failure();
        send_slot& s = tpipe::detail::slot_at(sends_, tag, [this] { return who(); });
        if (header.size() > max_device_header_bytes)
            throw error(who() + ": a payload header of " + std::to_string(header.size()) + " bytes does not fit the envelope's " +
                        std::to_string(max_device_header_bytes));
        detail::envelope e;
        e.key = key_;
        e.tag = tag;
        e.header_bytes = static_cast<std::uint32_t>(header.size());
        e.body_bytes = body.size();
        std::memcpy(e.header, header.data(), header.size());
        std::memcpy(host_envelope(tag), &e, sizeof(e));
        Api& a = core_.api;
        a.copy_async(device_envelope(tag), host_envelope(tag), detail::envelope_bytes, dir_.stream,
                     who() + ": payload envelope to the device");
        check(a.group_start(), "ncclGroupStart");
        int rc = a.send(device_envelope(tag), detail::envelope_bytes, peer_, dir_.comm, dir_.stream);
        if (rc == 0 && !body.empty()) rc = a.send(body.data(), body.size(), peer_, dir_.comm, dir_.stream);
        const int end = a.group_end();
        check(rc, "ncclSend (payload)");
        check(end, "ncclGroupEnd (payload)");
        s.marker = a.record(dir_.stream);
        s.in_flight = true;
        pending_sends_.push_back(tag);
    }

    //! Only notes the receive: the lane posts NCCL's receives in the sender's order (see above).
    void post(int, std::span<std::byte>) override {}

    void poll(link_events& events, bool waiting) override
    {
        try {
            core_.rethrow_failure();
            if (sending_) advance_sends(events);
            else lane_->progress(waiting);
            if (waiting) core_.check_health();
            core_.rethrow_failure();
        } catch (...) {
            core_.fail(std::current_exception());  // aborts the communicators: nothing completes after an error
            throw;
        }
    }

    void reset(int tags) override
    {
        if (!pending_sends_.empty()) {
            core_.poisoned = true;  // an interrupted iteration left sends in flight
            pending_sends_.clear();
        }
        if (tags == tags_) return;
        tags_ = tags;
        release_markers();
        free_envelopes();
        sends_.assign(static_cast<std::size_t>(tags), send_slot{});
        if (sending_ && tags > 0) {
            const std::size_t bytes = static_cast<std::size_t>(tags) * detail::envelope_bytes;
            device_envelopes_ = core_.api.device_alloc(bytes);
            host_envelopes_ = core_.api.host_alloc(bytes);
        }
    }

    std::string peer() const override { return "NCCL, process " + std::to_string(peer_); }
    std::mutex* shared_lock() noexcept override { return &core_.m; }
    void attach(link_events* events) override { events_ = events; }
    std::optional<device_pool_ref> device_pool() const override { return pool_; }

private:
    struct send_slot {
        typename Api::marker_t marker{};
        bool in_flight = false;
    };

    std::string who() const { return "nccl::link to process " + std::to_string(peer_); }

    // ---- lane_sink (under the transport's lock, from any link's poll) -------------------------
    std::span<std::byte> announce(const detail::envelope& e) override
    {
        if (!events_)
            throw error(who() + ": a payload with tag " + std::to_string(e.tag) + " arrived for a channel that is gone");
        if (e.header_bytes > max_device_header_bytes)
            throw error(who() + ": an envelope announces a header of " + std::to_string(e.header_bytes) + " bytes, more than " +
                        std::to_string(max_device_header_bytes) + " (the processes run different programs)");
        return events_->place(e.tag, std::span<const std::byte>(e.header, e.header_bytes));
    }
    void arrived(int tag) noexcept override
    {
        if (events_) events_->arrived(tag);
    }

    //! Reports the sends whose group completed.
    void advance_sends(link_events& events)
    {
        for (std::size_t k = 0; k < pending_sends_.size();) {
            const int tag = pending_sends_[k];
            send_slot& s = sends_[static_cast<std::size_t>(tag)];
            const int rc = core_.api.query(s.marker);
            if (rc == 1) {
                ++k;
                continue;
            }
            core_.api.release(s.marker);
            s.in_flight = false;
            if (rc != 0)
                throw error(who() + ": the transfer stream failed: " + std::string(core_.api.describe_stream(rc)));
            pending_sends_[k] = pending_sends_.back();
            pending_sends_.pop_back();
            events.sent(tag);
        }
    }

    void* device_envelope(int tag) const noexcept { return static_cast<std::byte*>(device_envelopes_) + tag * detail::envelope_bytes; }
    void* host_envelope(int tag) const noexcept { return static_cast<std::byte*>(host_envelopes_) + tag * detail::envelope_bytes; }

    void check(int rc, const char* what)
    {
        if (rc != 0)
            throw nccl_error(who() + ": " + what + " failed: " + std::string(core_.api.describe(rc, dir_.comm)), rc);
    }

    void release_markers() noexcept
    {
        for (auto& s : sends_)
            if (s.in_flight) {
                core_.api.release(s.marker);
                s.in_flight = false;
            }
    }
    void free_envelopes() noexcept
    {
        if (device_envelopes_) core_.api.device_free(std::exchange(device_envelopes_, nullptr));
        if (host_envelopes_) core_.api.host_free(std::exchange(host_envelopes_, nullptr));
    }

    detail::transport_core<Api>& core_;
    device_pool_ref pool_;
    int peer_, key_;
    bool sending_;
    typename detail::transport_core<Api>::direction& dir_;
    detail::receive_lane<Api>* lane_ = nullptr;
    link_events* events_ = nullptr;  //!< the channel's (attach)
    int tags_ = -1;
    std::vector<send_slot> sends_;
    std::vector<int> pending_sends_;
    void* device_envelopes_ = nullptr;
    void* host_envelopes_ = nullptr;
};

} // namespace tpipe::nccl
