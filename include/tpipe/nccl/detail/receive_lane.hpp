#pragma once
// detail::receive_lane<Api>: the receiving side of one (NCCL communicator, peer) pair, the piece
// that keeps a boundary's receives in NCCL's order.
//
// NCCL matches the messages between two ranks in the order they were posted, with no tags and
// no sizes on the wire. So every payload travels as two messages in one group: an envelope of
// envelope_bytes (which channel, which tag, the payload's header, the body's size), then the body.
// The receiver cannot post a body's receive before it knows its size, and a receive posted out
// of the sender's order would take another message's bytes. The lane therefore posts exactly
//
//   envelope, body (if the envelope announces one), envelope, body, ...
//
// one at a time, in the order the sender sent them, whatever the channel or tag (the envelope
// says where each message goes), so several channels between the same pair (interleaved
// schedules: a rank holds several stages) need no agreement on how their sends interleave.
//
// It posts an envelope's receive only while a receiver waits for a message that has not arrived
// (progress(true): one envelope per call), never ahead: an NCCL receive blocks every later launch
// of its communicator until the message arrives, so a receive posted early could hold back this
// process's own sends that the peer needs first (a deadlock). The body's receive is posted as
// soon as its envelope is in: its sender posted both together. Its sinks are the receiving links
// (tpipe/nccl/link.hpp), one per channel, found by the envelope's key.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/transport/device_payload_traits.hpp"
#include "tpipe/nccl/nccl_error.hpp"

namespace tpipe::nccl::detail {

//! What the sender announces before a body (in device memory for NCCL, copied to the host).
struct envelope {
    std::uint32_t magic = 0x7470656eu;  // "tpen"
    std::int32_t key = 0;               //!< the channel: 2 * boundary + (forward ? 0 : 1)
    std::int32_t tag = 0;
    std::uint32_t header_bytes = 0;
    std::uint64_t body_bytes = 0;
    std::byte header[tpipe::max_device_header_bytes]{};
};
inline constexpr std::size_t envelope_bytes = sizeof(envelope);
static_assert(envelope_bytes == 64 && std::is_trivially_copyable_v<envelope>);

//! Where the messages of a lane go: the receiving links.
class lane_sink {
public:
    //! The envelope of `tag` arrived: make the payload, return where its body goes (size
    //! e.body_bytes; may be empty). Throws if the envelope does not fit the channel.
    virtual std::span<std::byte> announce(const envelope& e) = 0;
    //! The body of `tag` (or the whole payload, if it had no body) is in place.
    virtual void arrived(int tag) noexcept = 0;

protected:
    ~lane_sink() = default;
};

template <api Api>
class receive_lane {
public:
    using comm_t = typename Api::comm_t;
    using stream_t = typename Api::stream_t;
    using marker_t = typename Api::marker_t;

    receive_lane(Api& a, comm_t comm, stream_t stream, int peer, int me)
        : api_(&a), comm_(comm), stream_(stream), peer_(peer), me_(me), device_(a.device_alloc(envelope_bytes)),
          host_(a.host_alloc(envelope_bytes))
    {
    }
    receive_lane(const receive_lane&) = delete;
    receive_lane& operator=(const receive_lane&) = delete;
    ~receive_lane()
    {
        if (state_ != idle) api_->release(marker_);
        api_->device_free(device_);
        api_->host_free(host_);
    }

    void attach(int key, lane_sink* s) { sinks_[key] = s; }
    void detach(int key) noexcept { sinks_.erase(key); }

    //! Whether an NCCL receive of this lane is posted and not complete.
    bool busy() const noexcept { return state_ != idle; }
    int peer() const noexcept { return peer_; }

    //! Moves the lane on as far as it can without waiting (under the transport's lock); posts one
    //! envelope's receive when the lane is idle and a receiver waits (`wanted`) for a message that
    //! has not arrived, unless a message arrived in this call (it may be the one awaited). Throws nccl_error / tpipe::error when NCCL or the stream fails or a
    //! message does not fit.
    void progress(bool wanted)
    {
        for (;;) {
            switch (state_) {
            case idle:
                if (!wanted) return;
                wanted = false;  // the receiver tells again, on its next poll, if it still waits
                post_envelope();
                break;
            case envelope_posted: {
                if (!complete()) return;
                envelope e;
                std::memcpy(&e, host_, envelope_bytes);
                if (e.magic != envelope{}.magic)
                    throw tpipe::error(where() + ": received " + std::to_string(envelope_bytes) +
                                       " bytes that are not a tpipe envelope; another NCCL user posts on tpipe's communicator, "
                                       "or the processes run different programs");
                auto it = sinks_.find(e.key);
                if (it == sinks_.end())
                    throw tpipe::error(where() + ": a payload for boundary " + std::to_string(e.key / 2) +
                                       (e.key % 2 ? " (gradients)" : " (activations)") + ", tag " + std::to_string(e.tag) +
                                       ", arrived, but this process has no such receiving channel (the processes disagree on the "
                                       "pipeline or program)");
                const std::span<std::byte> body = it->second->announce(e);
                if (body.size() != e.body_bytes)
                    throw tpipe::error(where() + ": the sender's body of tag " + std::to_string(e.tag) + " has " +
                                       std::to_string(e.body_bytes) + " bytes, but the payload made from its header has " +
                                       std::to_string(body.size()) + " (the processes disagree on device_payload_traits)");
                current_ = {it->second, e.tag};
                if (body.empty()) {
                    state_ = idle;
                    wanted = false;
                    current_.first->arrived(current_.second);
                    break;
                }
                call(api_->recv(body.data(), body.size(), peer_, comm_, stream_), "ncclRecv (payload body)");
                marker_ = api_->record(stream_);
                state_ = body_posted;
                break;
            }
            case body_posted:
                if (!complete()) return;
                state_ = idle;
                wanted = false;
                current_.first->arrived(current_.second);
                break;
            }
        }
    }

private:
    enum state_t { idle, envelope_posted, body_posted };

    std::string where() const
    {
        return "tpipe::nccl::transport: process " + std::to_string(me_) + " receiving from process " + std::to_string(peer_);
    }

    void call(int rc, const char* what)
    {
        if (rc != 0) throw nccl_error(where() + ": " + what + " failed: " + std::string(api_->describe(rc, comm_)), rc);
    }

    void post_envelope()
    {
        call(api_->recv(device_, envelope_bytes, peer_, comm_, stream_), "ncclRecv (payload envelope)");
        api_->copy_async(host_, device_, envelope_bytes, stream_, where() + ": payload envelope to the host");
        marker_ = api_->record(stream_);
        state_ = envelope_posted;
    }

    //! Whether the posted step completed (releases its marker then).
    bool complete()
    {
        const int rc = api_->query(marker_);
        if (rc == 1) return false;
        api_->release(marker_);
        if (rc != 0) {
            state_ = idle;
            throw tpipe::error(where() + ": the transfer stream failed: " + std::string(api_->describe_stream(rc)));
        }
        return true;
    }

    Api* api_;
    comm_t comm_;
    stream_t stream_;
    int peer_, me_;
    void* device_;
    void* host_;
    state_t state_ = idle;
    marker_t marker_{};
    std::pair<lane_sink*, int> current_{nullptr, 0};
    std::unordered_map<int, lane_sink*> sinks_;
};

} // namespace tpipe::nccl::detail
