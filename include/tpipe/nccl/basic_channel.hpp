#pragma once
// tpipe::nccl::basic_channel<T, Api, Pool>: a tpipe::channel between ranks of different
// processes over NCCL (made by tpipe::nccl::basic_transport), for payloads whose body is in
// device memory (tpipe/cuda/peer_payload.hpp).
//
// Sending end: send(tag, v) keeps v and issues, on the direction's transfer stream, the copy of
// its envelope (channel, tag, header, body size: detail/receive_lane.hpp) to device memory and
// one NCCL group of two sends, the envelope and the body; it never waits. v's body was made by
// the sender's compute, whose completion the runner awaited before the SEND, so the transfer
// stream may read it. v is released once that group has completed (drain()).
// Receiving end: post(tag) only notes the receive: NCCL receives are posted when a receiver
// waits (arrival), in the sender's order, by the lane of its peer; the body goes into the object
// that cuda::device_payload_traits<T>::make(header, pool) builds from the receiving side's pool.
// arrival(tag) completes once the body is in place (its transfer completed on the stream).
//
// Waits are tpipe::pollers of the waiting loop; they also poll ncclCommGetAsyncError, and on an
// error abort the transport's communicators and throw tpipe::nccl::nccl_error. The iteration's
// stop token (reset) makes waits throw tpipe::operation_cancelled; an NCCL transfer that was
// left half done cannot be taken back, so the transport aborts its communicators when it is
// destroyed, and the runner refuses to run again over it (as over MPI).
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/polled_awaiter.hpp"
#include "tpipe/exec/stage.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/detail/receive_lane.hpp"
#include "tpipe/nccl/detail/transport_core.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/cuda/peer_payload.hpp"

namespace tpipe::nccl {

template <payload T, api Api, cuda::payload_pool Pool>
class basic_channel final : private detail::lane_sink {
public:
    using value_type = T;
    using traits = cuda::device_payload_traits<T>;

    //! One direction of one boundary (key = 2 * boundary + (forward ? 0 : 1)) with process
    //! `peer`, tags [0, tags). Made by basic_transport::connect.
    basic_channel(detail::transport_core<Api>& core, Pool& pool, int peer, int key, bool sending, int tags)
        : core_(core), pool_(pool), peer_(peer), key_(key), sending_(sending), dir_(core.towards(peer, sending))
    {
        if (!sending_) {
            std::lock_guard<std::mutex> g(core_.m);
            lane_ = &core_.lane(peer_);
            lane_->attach(key_, this);
        }
        reset(tags);
    }
    basic_channel(const basic_channel&) = delete;
    basic_channel& operator=(const basic_channel&) = delete;
    ~basic_channel()
    {
        std::lock_guard<std::mutex> g(core_.m);
        if (lane_) {
            // The lane may be receiving into one of our payloads: nobody may complete it now.
            if (lane_->busy()) core_.poisoned = true;
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

    // ---- sending end ------------------------------------------------------------------------
    void send(int tag, T&& v)
    {
        static_assert(cuda::device_payload<T, Pool>, "tpipe::nccl::channel: this stage payload type has no device form; specialise "
                                               "tpipe::cuda::device_payload_traits<T> (tpipe/cuda/peer_payload.hpp)");
        if (!sending_) throw error("nccl::channel: send on the receiving end of a channel");
        std::lock_guard<std::mutex> g(core_.m);
        core_.rethrow_failure();
        send_slot& s = at(sends_, tag);
        if (s.value) throw error("nccl::channel: tag " + std::to_string(tag) + " was sent twice in one iteration");
        s.value.emplace(std::move(v));
        const auto head = traits::header_of(*s.value);
        const std::span<const std::byte> body = traits::device_bytes(std::as_const(*s.value));
        detail::envelope e;
        e.key = key_;
        e.tag = tag;
        e.header_bytes = sizeof(head);
        e.body_bytes = body.size();
        std::memcpy(e.header, &head, sizeof(head));
        std::memcpy(host_envelope(tag), &e, sizeof(e));
        Api& a = core_.api;
        a.copy_async(device_envelope(tag), host_envelope(tag), detail::envelope_bytes, dir_.stream,
                     "nccl::channel to process " + std::to_string(peer_) + ": payload envelope to the device");
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

    //! Completes once every payload sent this iteration was released (its group completed).
    auto drain()
    {
        return wait_for(this, nullptr, [](basic_channel& c) {
            c.advance_sends();
            return c.pending_sends_.empty();
        });
    }

    // ---- receiving end ----------------------------------------------------------------------
    //! Notes the receive of `tag` (NCCL's receive is posted when a receiver waits: see above).
    void post(int tag)
    {
        if (sending_) throw error("nccl::channel: post on the sending end of a channel");
        (void)at(recvs_, tag);
    }

    //! Completes once the payload of `tag` is in place.
    auto arrival(int tag)
    {
        if (sending_) throw error("nccl::channel: arrival on the sending end of a channel");
        (void)at(recvs_, tag);
        return wait_for(this, &recvs_[static_cast<std::size_t>(tag)].state, [tag](basic_channel& c) {
            c.lane_->progress();
            return c.recvs_[static_cast<std::size_t>(tag)].state.load(std::memory_order_acquire) == full;
        });
    }

    bool ready(int tag) const noexcept
    {
        return tag >= 0 && tag < tags_ && recvs_[static_cast<std::size_t>(tag)].state.load(std::memory_order_acquire) == full;
    }

    T take(int tag)
    {
        std::lock_guard<std::mutex> g(core_.m);
        recv_slot& s = at(recvs_, tag);
        return tpipe::detail::take_arrived(s.state, s.value, full, taken, "nccl::channel", tag);
    }

    // ---- both ends --------------------------------------------------------------------------

    //! Starts a new iteration with room for `tags` tags (no receive may be in progress), whose
    //! waits throw operation_cancelled once `stop` is stopped.
    void reset(int tags, std::stop_token stop = {})
    {
        if (tags < 0) throw invalid_argument("nccl::channel: the number of tags must be >= 0");
        std::lock_guard<std::mutex> g(core_.m);
        if (!pending_sends_.empty()) {
            core_.poisoned = true;  // an interrupted iteration left sends in flight
            pending_sends_.clear();
        }
        if (tags != tags_) {
            release_markers();
            free_envelopes();
            recvs_ = std::vector<recv_slot>(static_cast<std::size_t>(tags));
            sends_ = std::vector<send_slot>(static_cast<std::size_t>(tags));
            tags_ = tags;
            if (sending_ && tags > 0) {
                const std::size_t bytes = static_cast<std::size_t>(tags) * detail::envelope_bytes;
                device_envelopes_ = core_.api.device_alloc(bytes);
                host_envelopes_ = core_.api.host_alloc(bytes);
            }
        }
        for (auto& s : recvs_) {
            s.state.store(idle, std::memory_order_relaxed);
            s.value.reset();
        }
        for (auto& s : sends_) s.value.reset();
        stop_ = std::move(stop);
    }

private:
    enum state_t : int { idle, full, taken };

    struct recv_slot {
        std::atomic<int> state{idle};
        std::optional<T> value;
    };
    struct send_slot {
        std::optional<T> value;
        typename Api::marker_t marker{};
        bool in_flight = false;
    };

    //! Awaits done(channel) (called under the transport's lock), polled from the loop.
    template <class Done>
    struct waiter final : polled_awaiter<waiter<Done>> {
        basic_channel* c;
        const std::atomic<int>* receiving;  //!< the slot a receiver waits on (nullptr: drain)
        Done done;
        bool counted = false;  //!< registered with the lane as a waiting receiver
        bool finished_ = false;
        std::exception_ptr error{};

        waiter(basic_channel* ch, const std::atomic<int>* r, Done d) : c(ch), receiving(r), done(std::move(d)) {}
        waiter(waiter&& o) noexcept : c(o.c), receiving(o.receiving), done(std::move(o.done)) {}
        ~waiter() { unregister(); }

        void unregister() noexcept
        {
            if (!counted) return;
            std::lock_guard<std::mutex> g(c->core_.m);
            c->lane_->wait_end(receiving);
            counted = false;
        }

        bool settle() noexcept
        {
            if (finished_) return true;
            if (c->stop_.stop_requested()) return finished_ = true;
            std::unique_lock<std::mutex> g(c->core_.m, std::try_to_lock);
            if (!g.owns_lock()) return false;  // another loop is advancing the transport
            try {
                c->core_.rethrow_failure();
                if (receiving && !counted) {
                    c->lane_->wait_begin(receiving, full);
                    counted = true;
                }
                if (done(*c)) finished_ = true;
                else c->core_.check_health();
                c->core_.rethrow_failure();
            } catch (...) {
                error = std::current_exception();
                c->core_.fail(error);
                finished_ = true;
            }
            if (finished_ && counted) {
                c->lane_->wait_end(receiving);
                counted = false;
            }
            return finished_;
        }
        void await_resume()
        {
            unregister();
            if (error) std::rethrow_exception(error);
            if (c->stop_.stop_requested()) throw operation_cancelled();
        }
    };
    template <class Done>
    static waiter<Done> wait_for(basic_channel* c, const std::atomic<int>* receiving, Done d)
    {
        return waiter<Done>(c, receiving, std::move(d));
    }

    // ---- lane_sink (under the transport's lock) ---------------------------------------------
    std::span<std::byte> announce(const detail::envelope& e) override
    {
        if constexpr (cuda::device_payload<T, Pool>) {
            if (e.tag < 0 || e.tag >= tags_)
                throw error("nccl::channel: a payload with tag " + std::to_string(e.tag) + " arrived from process " +
                            std::to_string(peer_) + ", outside [0, " + std::to_string(tags_) + ")");
            using header = typename traits::header;
            if (e.header_bytes != sizeof(header))
                throw error("nccl::channel: the payload header of tag " + std::to_string(e.tag) + " from process " +
                            std::to_string(peer_) + " has " + std::to_string(e.header_bytes) + " bytes, this process expects " +
                            std::to_string(sizeof(header)) + " (the processes disagree on the payload type)");
            recv_slot& s = recvs_[static_cast<std::size_t>(e.tag)];
            if (s.state.load(std::memory_order_relaxed) != idle)
                throw error("nccl::channel: tag " + std::to_string(e.tag) + " arrived twice in one iteration from process " +
                            std::to_string(peer_));
            header h;
            std::memcpy(&h, e.header, sizeof(h));
            s.value.emplace(traits::make(h, pool_));
            return traits::device_bytes(*s.value);
        } else {
            throw error("nccl::channel: this payload type has no device form (device_payload_traits)");
        }
    }
    void arrived(int tag) noexcept override { recvs_[static_cast<std::size_t>(tag)].state.store(full, std::memory_order_release); }

    //! Releases the payloads whose group completed (under the lock).
    void advance_sends()
    {
        for (std::size_t k = 0; k < pending_sends_.size();) {
            send_slot& s = sends_[static_cast<std::size_t>(pending_sends_[k])];
            const int rc = core_.api.query(s.marker);
            if (rc == 1) {
                ++k;
                continue;
            }
            core_.api.release(s.marker);
            s.in_flight = false;
            if (rc != 0)
                throw error("nccl::channel: the transfer stream to process " + std::to_string(peer_) +
                            " failed: " + std::string(core_.api.describe_stream(rc)));
            s.value.reset();
            pending_sends_[k] = pending_sends_.back();
            pending_sends_.pop_back();
        }
    }

    template <class Slot>
    Slot& at(std::vector<Slot>& v, int tag)
    {
        if (tag < 0 || tag >= tags_)
            throw error("nccl::channel: tag " + std::to_string(tag) + " is outside [0, " + std::to_string(tags_) + ")");
        return v[static_cast<std::size_t>(tag)];
    }

    void* device_envelope(int tag) const noexcept { return static_cast<std::byte*>(device_envelopes_) + tag * detail::envelope_bytes; }
    void* host_envelope(int tag) const noexcept { return static_cast<std::byte*>(host_envelopes_) + tag * detail::envelope_bytes; }

    void check(int rc, const char* what)
    {
        if (rc != 0)
            throw nccl_error("nccl::channel to process " + std::to_string(peer_) + ": " + what + " failed: " +
                                 std::string(core_.api.describe(rc, dir_.comm)),
                             rc);
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
    Pool& pool_;
    int peer_, key_;
    bool sending_;
    typename detail::transport_core<Api>::direction& dir_;
    detail::receive_lane<Api>* lane_ = nullptr;
    int tags_ = -1;
    std::vector<recv_slot> recvs_;
    std::vector<send_slot> sends_;
    std::vector<int> pending_sends_;
    void* device_envelopes_ = nullptr;
    void* host_envelopes_ = nullptr;
    std::stop_token stop_;  //!< the iteration's: its waits end once it is stopped
};

} // namespace tpipe::nccl
