#pragma once
// tpipe::linked_channel<T>: the tpipe::channel between ranks of different processes (or of two
// GPUs of this one), written once over a byte link (tpipe/transport/link.hpp) of any engine:
// MPI, UCX, NCCL, CUDA peer copies. A payload travels as its header (shape), then its body,
// received in place into the object that the payload's form for the link's memory builds:
// payload_traits<T>::make(header) for host memory (tpipe/transport/payload_traits.hpp),
// device_payload_traits<T>::make(header, pool) for device memory, from the pool the link gives
// (tpipe/transport/device_payload_traits.hpp). A type needs only the form of the links it
// crosses; a link of the other memory is refused when the channel is made, naming what to
// specialise.
//
// Receiving end: post(tag) has the link receive the header, early (the runner posts every
// receive of a rank when the rank starts its iteration). Once the header is in, the link asks
// for the body's place: whoever polls the link first makes the object, the receiving loop while
// it waits or the engine's background thread while the loop computes (link::drive), so a large
// body moves during the receiver's compute. arrival(tag) completes once the body is in place.
// Sending end: send(tag, v) keeps v and hands its header and body to the link at once; the
// payload is released when the link reports them sent (given to its tpipe::payload_pool when it
// is a tpipe::recyclable_payload, so that a later receive of that size reuses its body instead
// of allocating and zero-filling one); drain() completes when every send of the iteration has.
//
// A channel over a link within this process holds both ends (channel_end::both): the sending
// loop and the receiving loop share it.
//
// Threads: the loop that owns an end calls send/post/arrival/ready/take; the engine's
// background thread may advance the channel too; a mutex (try-locked by the background thread
// and by waits) keeps the link to one caller at a time: the channel's own, or the one its link
// shares with the links that report events for each other (NCCL's of one transport).
#include <atomic>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/polled_awaiter.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/transport/device_payload_traits.hpp"
#include "tpipe/transport/link.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/transport/recyclable_payload.hpp"

namespace tpipe {

namespace detail {
//! The header type of a payload form (`Traits`), or an empty stand-in where T has no such form.
template <class Traits, bool Has>
struct form_header {
    struct type {};
};
template <class Traits>
struct form_header<Traits, true> {
    using type = typename Traits::header;
};
//! The pool a device form's payloads come from (void where T has none).
template <class T, bool Has>
struct form_pool {
    using type = void;
};
template <class T>
struct form_pool<T, true> {
    using type = typename device_payload_traits<T>::pool;
};
} // namespace detail

//! Which ends of a channel this process holds: one, or both (a link within this process: a copy
//! between two of its GPUs, tpipe::link_transport::open_within).
enum class channel_end { sender, receiver, both };

template <class T>
class linked_channel final : private link_events, private link_progress {
    static constexpr bool host_form = byte_payload<T>;
    static constexpr bool device_form = pooled_device_payload<T>;
    static_assert(host_form || device_form,
                  "tpipe::linked_channel: this stage payload type has no byte form, so it cannot cross processes; "
                  "specialise tpipe::payload_traits<T> for it (tpipe/transport/payload_traits.hpp), or, for a body in "
                  "device memory, tpipe::device_payload_traits<T> (tpipe/transport/device_payload_traits.hpp)");
    static_assert(detail::check_recyclable_payload<T>());  // recycling declared, or a sentence

    using host_header = typename detail::form_header<payload_traits<T>, host_form>::type;
    using device_header = typename detail::form_header<device_payload_traits<T>, device_form>::type;
    using device_pool_type = typename detail::form_pool<T, device_form>::type;

public:
    using value_type = T;

    //! One direction of one boundary over `l`, of tags [0, tags), whose `end` this process holds.
    //! Throws if T has no form for the link's memory.
    linked_channel(std::unique_ptr<tpipe::link> l, channel_end end, int tags)
        : link_(std::move(l)), end_(end), m_(lock_of(link_.get(), own_))
    {
        if (const auto pool = link_->device_pool()) {
            if constexpr (device_form)
                device_pool_ = &pool->template as<typename device_payload_traits<T>::pool>(who());
            else
                throw invalid_argument(who() + ": this link moves bodies in device memory, and the payload type has no device "
                                       "form; specialise tpipe::device_payload_traits<T> with its pool "
                                       "(tpipe/transport/device_payload_traits.hpp)");
        } else if constexpr (!host_form) {
            throw invalid_argument(who() + ": this link moves bodies in host memory, and the payload type has only a device "
                                   "form; specialise tpipe::payload_traits<T> (tpipe/transport/payload_traits.hpp)");
        }
        reset(tags);
        {
            std::lock_guard<std::mutex> g(m_);
            link_->attach(this);
        }
        link_->drive(this);
    }
    linked_channel(const linked_channel&) = delete;
    linked_channel& operator=(const linked_channel&) = delete;
    ~linked_channel()
    {
        link_->drive(nullptr);
        std::lock_guard<std::mutex> g(m_);
        link_->attach(nullptr);
        link_.reset();  // cancels what an interrupted iteration left outstanding
    }

    // ---- sending end ------------------------------------------------------------------------
    void send(int tag, T&& v)
    {
        if (end_ == channel_end::receiver) throw error(who() + ": send on the receiving end of a channel");
        std::lock_guard<std::mutex> g(m_);
        send_slot& s = at(sends_, tag);
        if (s.value) throw error(who() + ": tag " + std::to_string(tag) + " was sent twice in one iteration");
        s.value.emplace(std::move(v));
        std::span<const std::byte> body;
        if (on_device()) {
            if constexpr (device_form) {
                s.device_head = device_payload_traits<T>::header_of(*s.value);
                body = device_payload_traits<T>::device_bytes(std::as_const(*s.value));
            }
        } else if constexpr (host_form) {
            s.host_head = payload_traits<T>::header_of(*s.value);
            body = payload_traits<T>::bytes(std::as_const(*s.value));
        }
        link_->send(tag, header_bytes(s), body);
        unsent_.fetch_add(1, std::memory_order_relaxed);
    }

    //! Completes once every payload sent this iteration was released.
    auto drain()
    {
        return wait_for(this, [](linked_channel& c) { return c.unsent_.load(std::memory_order_acquire) == 0; });
    }

    // ---- receiving end ----------------------------------------------------------------------
    //! Starts receiving `tag` (once per iteration; later calls do nothing).
    void post(int tag)
    {
        if (end_ == channel_end::sender) throw error(who() + ": post on the sending end of a channel");
        std::lock_guard<std::mutex> g(m_);
        recv_slot& s = at(recvs_, tag);
        if (s.state.load(std::memory_order_relaxed) != idle) return;  // posted, or in already (shared order)
        link_->post(tag, header_bytes(s));
        s.state.store(posted, std::memory_order_relaxed);
    }

    //! Completes once the payload of `tag` is in place (posts the receive if nobody did).
    auto arrival(int tag)
    {
        post(tag);
        return wait_for(this, [tag](linked_channel& c) { return c.ready(tag); });
    }

    bool ready(int tag) const noexcept
    {
        return tag >= 0 && tag < tags_ && recvs_[static_cast<std::size_t>(tag)].state.load(std::memory_order_acquire) == full;
    }

    T take(int tag)
    {
        recv_slot& s = at(recvs_, tag);
        return detail::take_arrived(s.state, s.value, full, taken, "linked_channel", tag);
    }

    // ---- both ends --------------------------------------------------------------------------

    //! Starts a new iteration with room for `tags` tags, whose arrivals and drains throw
    //! operation_cancelled once `stop` is stopped; the link forgets what the last one left.
    void reset(int tags, std::stop_token stop = {})
    {
        if (tags < 0) throw invalid_argument(who() + ": the number of tags must be >= 0");
        std::lock_guard<std::mutex> g(m_);
        link_->reset(tags);
        if (tags != tags_) {
            recvs_ = std::vector<recv_slot>(static_cast<std::size_t>(tags));
            sends_ = std::vector<send_slot>(static_cast<std::size_t>(tags));
            tags_ = tags;
        }
        for (auto& s : recvs_) {
            s.state.store(idle, std::memory_order_relaxed);
            s.value.reset();
        }
        for (auto& s : sends_) s.value.reset();
        unsent_.store(0, std::memory_order_relaxed);
        has_error_.store(false, std::memory_order_relaxed);
        error_ = nullptr;
        stop_ = std::move(stop);
    }

private:
    enum state_t : int { idle, posted, full, taken };

    struct recv_slot {
        std::atomic<int> state{idle};
        host_header host_head{};
        device_header device_head{};
        std::optional<T> value;
    };
    struct send_slot {
        host_header host_head{};
        device_header device_head{};
        std::optional<T> value;
    };

    static std::mutex& lock_of(tpipe::link* l, std::mutex& own)
    {
        if (!l) throw invalid_argument("linked_channel: no link");
        std::mutex* shared = l->shared_lock();
        return shared ? *shared : own;
    }

    bool on_device() const noexcept { return device_pool_ != nullptr; }

    //! The slot's header in the link's memory form.
    template <class Slot>
    auto header_bytes(Slot& s) noexcept
    {
        return on_device() ? std::as_writable_bytes(std::span(&s.device_head, 1)) : std::as_writable_bytes(std::span(&s.host_head, 1));
    }

    //! Awaits `done(channel)` from the loop: tested at once, then by a poller while idle; each
    //! test first polls the link.
    template <class Done>
    struct waiter final : polled_awaiter<waiter<Done>> {
        linked_channel* c;
        Done done;

        waiter(linked_channel* ch, Done d) : c(ch), done(std::move(d)) {}

        bool settle() noexcept
        {
            c->try_poll(done);
            return c->stop_.stop_requested() || c->failed() || done(*c);
        }
        void await_resume()
        {
            if (c->stop_.stop_requested()) throw operation_cancelled();
            c->rethrow_failure();
        }
    };

    template <class Done>
    static waiter<Done> wait_for(linked_channel* c, Done d)
    {
        return waiter<Done>(c, std::move(d));
    }

    std::string who() const { return "linked_channel (" + link_->peer() + ")"; }

    template <class Slot>
    Slot& at(std::vector<Slot>& v, int tag)
    {
        return detail::slot_at(v, tag, [this] { return who(); });
    }

    bool failed() const noexcept { return has_error_.load(std::memory_order_acquire); }
    void rethrow_failure()
    {
        if (!failed()) return;
        std::lock_guard<std::mutex> g(m_);
        if (error_) std::rethrow_exception(error_);
    }

    //! Polls the link unless someone else is; an error it throws fails the channel's waits. A
    //! loop waits while `done(channel)` (tested under the lock) is false; nullptr: nobody waits.
    template <class Done = std::nullptr_t>
    void try_poll(const Done& done = nullptr) noexcept
    {
        std::unique_lock<std::mutex> g(m_, std::try_to_lock);
        if (!g.owns_lock()) return;
        try {
            bool waiting = false;
            if constexpr (!std::is_same_v<Done, std::nullptr_t>) waiting = !done(*this);
            link_->poll(*this, waiting);
        } catch (...) {
            error_ = std::current_exception();
            has_error_.store(true, std::memory_order_release);
        }
    }

    // ---- link_progress and link_events (called under m_) --------------------------------------
    void advance() noexcept override { try_poll(); }

    std::span<std::byte> place(int tag, std::span<const std::byte> header) override
    {
        recv_slot& s = at(recvs_, tag);
        if (const int st = s.state.load(std::memory_order_relaxed); st != idle && st != posted)
            throw error(who() + ": tag " + std::to_string(tag) + " arrived twice in one iteration");
        const std::span<std::byte> head = header_bytes(s);
        if (header.size() != head.size())
            throw detail::size_mismatch(who(), "header", tag, "", std::to_string(header.size()), head.size());
        if (header.data() != head.data()) std::memcpy(head.data(), header.data(), head.size());
        if (on_device()) {
            if constexpr (device_form) {
                s.value.emplace(device_payload_traits<T>::make(s.device_head, *device_pool_));
                return device_payload_traits<T>::device_bytes(*s.value);
            }
        } else if constexpr (host_form) {
            if constexpr (recyclable_payload<T>) link_->reclaim();  // so that this body can be a finished send's
            s.value.emplace(payload_traits<T>::make(s.host_head));
            return payload_traits<T>::bytes(*s.value);
        }
        throw error(who() + ": no payload form for this link");  // unreachable: refused when made
    }
    void arrived(int tag) override { at(recvs_, tag).state.store(full, std::memory_order_release); }
    void sent(int tag) noexcept override
    {
        send_slot& s = sends_[static_cast<std::size_t>(tag)];
        if constexpr (recyclable_payload<T>)
            if (!on_device()) payload_traits<T>::recycle(std::move(*s.value));  // its body serves a later receive
        s.value.reset();
        unsent_.fetch_sub(1, std::memory_order_release);
    }

    std::unique_ptr<tpipe::link> link_;
    channel_end end_;
    int tags_ = -1;
    std::mutex own_;
    std::mutex& m_;  //!< own_, or the lock the link shares with others
    device_pool_type* device_pool_ = nullptr;  //!< where received device payloads come from; nullptr: host memory
    std::vector<recv_slot> recvs_;
    std::vector<send_slot> sends_;
    std::atomic<int> unsent_{0};  //!< sends whose payload the link still holds
    std::stop_token stop_;        //!< the iteration's: its waits end once it is stopped
    std::atomic<bool> has_error_{false};
    std::exception_ptr error_;
};

} // namespace tpipe
