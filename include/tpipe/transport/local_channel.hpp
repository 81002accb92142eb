#pragma once
// tpipe::local_channel<T>: a channel between two loops of the same process. A message is moved
// into a per-tag slot and moved out by the receiver: no copy, no allocation, no lock. Each slot
// is a one-shot rendezvous per iteration driven by one atomic word (iteration, state):
//
//   empty --send--> full --take--> taken      (receiver finds it without suspending)
//   empty --recv suspends--> waiting --send--> full, and the sender posts the receiver to its loop
//   waiting --cancel--> cancelled, and the canceller posts the receiver (which then throws)
//
// The canceller is the iteration's stop token (reset): a sleeping receiver has nobody to poll
// for it, so the channel watches the token (tpipe::on_stop) and wakes the waiting slots.
//
// A slot whose word names an earlier iteration is empty, so starting the next iteration is one
// increment. A payload an iteration left undelivered (after a failure) is destroyed when its
// slot is written again, or at once by clear().
#include <atomic>
#include <coroutine>
#include <cstdint>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/on_stop.hpp"

namespace tpipe {

namespace detail {

enum slot_state : std::uint32_t { slot_empty = 0, slot_full = 1, slot_waiting = 2, slot_cancelled = 3, slot_taken = 4 };

//! A slot's atomic word: the iteration it was last written in, and its state then.
constexpr std::uint32_t slot_word(std::uint32_t iteration, slot_state s) noexcept { return iteration << 3 | s; }

//! The type-independent part of a slot: its word and the receiver waiting on it.
struct slot_header {
    std::atomic<std::uint32_t> word{0};
    loop* home = nullptr;          //!< the waiting receiver's loop
    wake_node* waiter = nullptr;   //!< its queue entry (inside its awaiter)
};

//! The type-independent part of a channel: the current iteration and cancellation.
class channel_base {
public:
    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_seq_cst); }
    //! The word of a slot in `s` during the current iteration.
    std::uint32_t word(slot_state s) const noexcept { return slot_word(iteration_, s); }

protected:
    std::atomic<bool> cancelled_{false};
    std::uint32_t iteration_ = 1;  //!< words of other iterations read as empty (0 is never current)
};

//! Awaits until a slot is full (or the channel is cancelled). Type-independent, so the runtime
//! can wait on any boundary's slot through one code path.
class slot_wait {
public:
    slot_wait(const channel_base& c, slot_header& s) noexcept : channel_(c), slot_(s) {}

    bool await_ready() const noexcept
    {
        return slot_.word.load(std::memory_order_acquire) == channel_.word(slot_full) || channel_.cancelled();
    }
    bool await_suspend(std::coroutine_handle<> h) noexcept
    {
        node_.handle = h;
        slot_.home = loop::current();
        slot_.waiter = &node_;
        const std::uint32_t full = channel_.word(slot_full);
        std::uint32_t seen = slot_.word.load(std::memory_order_acquire);
        // Only the sender changes the word meanwhile (to full), so this retries at most once.
        do {
            if (seen == full) return false;  // it became full meanwhile
        } while (!slot_.word.compare_exchange_weak(seen, channel_.word(slot_waiting), std::memory_order_seq_cst,
                                                   std::memory_order_acquire));
        if (channel_.cancelled()) {
            // A cancel may have scanned this slot before we registered: take the wait back.
            std::uint32_t expected = channel_.word(slot_waiting);
            if (slot_.word.compare_exchange_strong(expected, channel_.word(slot_empty), std::memory_order_seq_cst,
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

    //! Starts a new iteration with room for tags [0, tags), cancelled once `stop` is stopped.
    //! O(1) when the number of tags is unchanged: payloads the last iteration did not deliver
    //! stay until their slot is written again (call clear() to destroy them now, e.g. after a
    //! failure).
    void reset(int tags, std::stop_token stop = {})
    {
        if (tags < 0) throw invalid_argument("local_channel: the number of tags must be >= 0");
        on_stop_.unwatch();  // the last iteration's token must not cancel this one
        cancelled_.store(false, std::memory_order_seq_cst);
        if (tags != tags_) {
            slots_ = std::make_unique<slot[]>(static_cast<std::size_t>(tags));
            tags_ = tags;
            iteration_ = 1;
        } else if (iteration_ < max_iteration) {
            ++iteration_;  // every slot now reads as empty
        } else {
            clear();
        }
        on_stop_.watch(std::move(stop), canceller{this});
    }

    //! Destroys every payload in the channel and starts a new iteration (O(tags)) under the
    //! same stop token.
    void clear()
    {
        for (int i = 0; i < tags_; ++i) {
            slots_[i].value.reset();
            slots_[i].word.store(0, std::memory_order_relaxed);
            slots_[i].home = nullptr;
            slots_[i].waiter = nullptr;
        }
        iteration_ = 1;
    }

    int tags() const noexcept { return tags_; }

    //! Moves v into the slot of `tag` and wakes its receiver, if one waits. Never waits; any
    //! thread.
    void send(int tag, T&& v)
    {
        slot& s = at(tag);
        const std::uint32_t w = s.word.load(std::memory_order_acquire);
        if (w == word(detail::slot_full) || w == word(detail::slot_taken))
            throw error("local_channel: tag " + std::to_string(tag) + " was sent twice in one iteration");
        s.value.emplace(std::move(v));  // (replaces a payload an earlier iteration left undelivered)
        const std::uint32_t before = s.word.exchange(word(detail::slot_full), std::memory_order_acq_rel);
        if (before == word(detail::slot_waiting)) s.home->post(s.waiter);
    }

    //! Nothing to start: the sender moves the payload straight into the slot.
    void post(int tag) { (void)at(tag); }

    //! The payload left the sender when send returned: completes at once.
    std::suspend_never drain() const noexcept { return {}; }

    //! True when the payload of `tag` has arrived and was not taken yet (receiver side).
    bool ready(int tag) const noexcept
    {
        return tag >= 0 && tag < tags_ && slots_[tag].word.load(std::memory_order_acquire) == word(detail::slot_full);
    }

    //! Moves the arrived payload of `tag` out (receiver side; requires ready(tag)).
    T take(int tag)
    {
        slot& s = at(tag);
        return detail::take_arrived(s.word, s.value, word(detail::slot_full), word(detail::slot_taken), "local_channel", tag);
    }

    //! Awaits the arrival of `tag` without taking it.
    detail::slot_wait arrival(int tag) { return detail::slot_wait(*this, at(tag)); }

    //! Awaits the payload of `tag` and moves it out (arrival, then take).
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

private:
    //! Wakes every waiting receiver with tpipe::operation_cancelled (the stop token's callback,
    //! on the thread that stopped it).
    void cancel() noexcept
    {
        cancelled_.store(true, std::memory_order_seq_cst);
        for (int i = 0; i < tags_; ++i) {
            slot& s = slots_[i];
            std::uint32_t expected = word(detail::slot_waiting);
            if (s.word.compare_exchange_strong(expected, word(detail::slot_cancelled), std::memory_order_seq_cst,
                                               std::memory_order_relaxed))
                s.home->post(s.waiter);
        }
    }

    struct slot : detail::slot_header {
        std::optional<T> value;
    };
    slot& at(int tag)
    {
        if (tag < 0 || tag >= tags_)
            throw error("local_channel: tag " + std::to_string(tag) + " is outside [0, " + std::to_string(tags_) + ")");
        return slots_[tag];
    }

    static constexpr std::uint32_t max_iteration = ~std::uint32_t{0} >> 3;

    struct canceller {
        local_channel* c;
        void operator()() const noexcept { c->cancel(); }
    };

    std::unique_ptr<slot[]> slots_;
    int tags_ = -1;
    on_stop<canceller> on_stop_;  // last: unregistered before the slots go
};

} // namespace tpipe

namespace tpipe {
static_assert(channel<local_channel<int>>);
}
