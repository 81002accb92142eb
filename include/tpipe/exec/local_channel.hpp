#pragma once
// tpipe::local_channel<T>: a channel between two loops of the same process. A message is moved
// into a per-tag slot and moved out by the receiver: no copy, no allocation, no lock. Each slot
// is a one-shot rendezvous driven by one atomic state:
//
//   empty --send--> full                      (receiver takes it without suspending)
//   empty --recv suspends--> waiting --send--> full, and the sender posts the receiver to its loop
//   waiting --cancel--> cancelled, and the canceller posts the receiver (which then throws)
#include <atomic>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/channel.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/exec/loop.hpp"

namespace tpipe {

namespace detail {

enum slot_state : std::uint8_t { slot_empty = 0, slot_full = 1, slot_waiting = 2, slot_cancelled = 3 };

//! The type-independent part of a slot: its state and the receiver waiting on it.
struct slot_header {
    std::atomic<std::uint8_t> state{slot_empty};
    loop* home = nullptr;          //!< the waiting receiver's loop
    wake_node* waiter = nullptr;   //!< its queue entry (inside its awaiter)
};

//! The type-independent part of a channel: cancellation.
class channel_base {
public:
    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_seq_cst); }

protected:
    std::atomic<bool> cancelled_{false};
};

//! Awaits until a slot is full (or the channel is cancelled). Type-independent, so the runtime
//! can wait on any boundary's slot through one code path.
class slot_wait {
public:
    slot_wait(const channel_base& c, slot_header& s) noexcept : channel_(c), slot_(s) {}

    bool await_ready() const noexcept
    {
        return slot_.state.load(std::memory_order_acquire) == slot_full || channel_.cancelled();
    }
    bool await_suspend(std::coroutine_handle<> h) noexcept
    {
        node_.handle = h;
        slot_.home = loop::current();
        slot_.waiter = &node_;
        std::uint8_t expected = slot_empty;
        if (!slot_.state.compare_exchange_strong(expected, slot_waiting, std::memory_order_seq_cst,
                                                 std::memory_order_acquire))
            return false;  // it became full meanwhile
        if (channel_.cancelled()) {
            // A cancel may have scanned this slot before we registered: take the wait back.
            expected = slot_waiting;
            if (slot_.state.compare_exchange_strong(expected, slot_empty, std::memory_order_seq_cst,
                                                    std::memory_order_acquire))
                return false;
            // Otherwise a sender or the canceller owns the wake-up and will post us.
        }
        return true;
    }
    void await_resume() const
    {
        if (channel_.cancelled()) throw operation_cancelled();
    }

private:
    const channel_base& channel_;
    slot_header& slot_;
    wake_node node_{};
};

} // namespace detail

template <payload T>
class local_channel : public detail::channel_base {
public:
    using value_type = T;

    local_channel() { reset(0); }
    explicit local_channel(int tags) { reset(tags); }
    local_channel(const local_channel&) = delete;
    local_channel& operator=(const local_channel&) = delete;

    //! Starts a new iteration with room for tags [0, tags); drops undelivered payloads.
    void reset(int tags)
    {
        if (tags < 0) throw invalid_argument("local_channel: the number of tags must be >= 0");
        if (tags != tags_) {
            slots_ = std::make_unique<slot[]>(static_cast<std::size_t>(tags));
            tags_ = tags;
        } else {
            for (int i = 0; i < tags_; ++i) {
                slots_[i].value.reset();
                slots_[i].state.store(detail::slot_empty, std::memory_order_relaxed);
                slots_[i].home = nullptr;
                slots_[i].waiter = nullptr;
            }
        }
        cancelled_.store(false, std::memory_order_seq_cst);
    }

    int tags() const noexcept { return tags_; }

    //! Moves v into the slot of `tag` and wakes its receiver, if one waits. Any thread.
    void put(int tag, T&& v)
    {
        slot& s = at(tag);
        if (s.state.load(std::memory_order_acquire) == detail::slot_full)
            throw error("local_channel: tag " + std::to_string(tag) + " was sent twice in one iteration");
        s.value.emplace(std::move(v));
        const std::uint8_t before = s.state.exchange(detail::slot_full, std::memory_order_acq_rel);
        if (before == detail::slot_waiting) s.home->post(s.waiter);
    }

    //! Eager send: the payload is in the channel when this returns; awaiting it completes at once.
    std::suspend_never send(int tag, T v)
    {
        put(tag, std::move(v));
        return {};
    }

    //! True when the payload of `tag` has arrived and was not taken yet (receiver side).
    bool ready(int tag) const noexcept
    {
        return tag >= 0 && tag < tags_ && slots_[tag].state.load(std::memory_order_acquire) == detail::slot_full &&
               slots_[tag].value.has_value();
    }

    //! Moves the arrived payload of `tag` out (receiver side; requires ready(tag)).
    T take(int tag)
    {
        slot& s = at(tag);
        if (s.state.load(std::memory_order_acquire) != detail::slot_full || !s.value)
            throw error("local_channel: tag " + std::to_string(tag) + " was taken before it arrived or twice");
        T v = std::move(*s.value);
        s.value.reset();
        return v;
    }

    //! Awaits the arrival of `tag` without taking it (the runtime's type-independent path).
    detail::slot_wait arrival(int tag) { return detail::slot_wait(*this, at(tag)); }

    //! The slot of `tag`, for the runtime's type-independent wait (see arrival()).
    detail::slot_header& header(int tag) { return at(tag); }

    //! Awaits the payload of `tag` and moves it out.
    auto recv(int tag)
    {
        struct awaiter {
            local_channel* c;
            int tag;
            detail::slot_wait w;
            bool await_ready() const noexcept { return w.await_ready(); }
            bool await_suspend(std::coroutine_handle<> h) noexcept { return w.await_suspend(h); }
            T await_resume()
            {
                w.await_resume();
                return c->take(tag);
            }
        };
        return awaiter{this, tag, arrival(tag)};
    }

    //! Wakes every waiting receiver with tpipe::operation_cancelled. Any thread.
    void cancel() noexcept
    {
        cancelled_.store(true, std::memory_order_seq_cst);
        for (int i = 0; i < tags_; ++i) {
            slot& s = slots_[i];
            std::uint8_t expected = detail::slot_waiting;
            if (s.state.compare_exchange_strong(expected, detail::slot_cancelled, std::memory_order_seq_cst,
                                                std::memory_order_relaxed))
                s.home->post(s.waiter);
        }
    }

private:
    struct slot : detail::slot_header {
        std::optional<T> value;
    };
    slot& at(int tag)
    {
        if (tag < 0 || tag >= tags_)
            throw error("local_channel: tag " + std::to_string(tag) + " is outside [0, " + std::to_string(tags_) + ")");
        return slots_[tag];
    }

    std::unique_ptr<slot[]> slots_;
    int tags_ = -1;
};

} // namespace tpipe
