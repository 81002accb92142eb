#pragma once
// The byte link: all that an engine (MPI, UCX, NCCL, CUDA peer copies...) implements to carry
// pipeline payloads. A link is one direction of one stage boundary between this process and one
// other, or between two devices of this process; it moves messages of a header and a body,
// keyed by a tag, and knows nothing of payload types. tpipe::linked_channel<T>
// (tpipe/transport/linked_channel.hpp) is the typed channel, written once over any link: its
// slots, tag checks, take, waits, stop and drain. A link_engine opens the links of a process's
// boundaries; tpipe::mpi::transport takes one (its own MPI engine by default,
// tpipe::ucx::engine for UCX), so a new engine is one file: a link and its engine.
//
// The contract. The channel calls a link under its lock (its own, or the one its link shares:
// shared_lock()), so one call at a time per link; links of one engine may be called from several
// threads at once (one per pipeline rank).
// - send(tag, header, body): eager, never waits for the receiver. Both spans stay valid and
//   unchanged until poll reports sent(tag). An empty body may travel as no message at all.
// - post(tag, header): the receiver expects tag (its header has header.size() bytes); a link may
//   receive the header into `header` from now on.
// - poll(events, waiting): advances what is outstanding, and reports, in any order:
//   - events.place(tag, header) once tag's header is in (`header`: its bytes, in the posted
//     span or the link's own): it returns where the body goes, and the link then receives the
//     body there (a body of any other size is an error naming both sizes);
//   - events.arrived(tag) once the body is in place (at once for an empty body);
//   - events.sent(tag) once a send's spans may go.
//   `waiting` says a loop waits on this poll for something that has not happened yet (not a
//   background thread driving the link, not a wait that is already over).
//   Errors are thrown (tpipe::error), and the channel's waits rethrow them.
// - reset(tags): a new iteration with tags [0, tags): whatever the last one left outstanding
//   (a failed iteration's receives) is cancelled and forgotten.
// - drive(progress): a link whose engine advances messages in the background (MPI's progress
//   thread) calls progress->advance() from there while the loops compute, so that a large body
//   moves during the receiver's compute; nullptr stops it (before the channel goes).
// - reclaim(): called before a host body is placed, so that other links' finished sends can
//   give their payloads back to the payload pool first (tpipe/transport/payload_pool.hpp).
// - peer(): the other end, for error messages ("process 3").
//
// Links that share one order of messages (NCCL: one receive order per pair of processes,
// whichever channel a message is for) report events for each other: polling one may place
// another's payload. They say so by shared_lock(), the mutex every channel over them locks
// (so a poll of one may touch the others), and they learn each channel's events from
// attach(events) when it is made (attach(nullptr) before it goes). A link is destroyed under its
// channel's lock.
//
// A link within this process (tpipe::link_transport::open_within: a copy between two of its GPUs,
// tpipe/cuda/peer_link.hpp) carries both ends of one channel (channel_end::both). Its send may
// report place(tag, header) at once, to the events attach gave it, so that the body goes straight
// into the receiver's payload; arrived and sent then come from poll.
//
// Where bodies live: host memory (tpipe::payload_traits<T>) unless device_pool() gives the pool
// that receivers make device payloads from (tpipe::device_payload_traits<T>; NCCL).
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/device_payload_traits.hpp"
#include "tpipe/transport/transport.hpp"

namespace tpipe {

//! What a link reports from poll (see the contract above); implemented by tpipe::linked_channel.
class link_events {
public:
    virtual std::span<std::byte> place(int tag, std::span<const std::byte> header) = 0;
    virtual void arrived(int tag) = 0;
    virtual void sent(int tag) noexcept = 0;

protected:
    ~link_events() = default;
};

//! What an engine's background thread may call: advances a channel if nobody else is (try-locks).
class link_progress {
public:
    virtual void advance() noexcept = 0;

protected:
    ~link_progress() = default;
};

//! One direction of one boundary between this process and another.
class link {
public:
    virtual ~link() = default;

    virtual void send(int tag, std::span<const std::byte> header, std::span<const std::byte> body) = 0;
    virtual void post(int tag, std::span<std::byte> header) = 0;
    virtual void poll(link_events& events, bool waiting) = 0;
    virtual void reset(int tags) = 0;
    virtual void drive(link_progress*) {}
    virtual void reclaim() noexcept {}
    virtual std::string peer() const = 0;

    //! Links that report events for each other (see above) share this mutex; nullptr: none.
    virtual std::mutex* shared_lock() noexcept { return nullptr; }
    virtual void attach(link_events*) {}
    //! Bodies in device memory, made from this pool; nullopt: host memory.
    virtual std::optional<device_pool_ref> device_pool() const { return std::nullopt; }
};

//! Opens the links of one process's boundaries. `peer` is the other end's process number in the
//! transport's communicator; `e` names the boundary, direction, end and tag count.
class link_engine {
public:
    virtual ~link_engine() = default;
    virtual std::unique_ptr<link> open(const endpoint& e, int peer) = 0;
    //! "MPI", "UCX": for the processes' agreement and error messages.
    virtual std::string name() const = 0;
};

namespace detail {
//! The per-tag slot of a link or channel: v[tag], or an error naming it when a tag is outside the
//! iteration's [0, v.size()). `who()` makes the name, for the error only.
template <class Slot, class Who>
Slot& slot_at(std::vector<Slot>& v, int tag, Who&& who)
{
    if (tag < 0 || static_cast<std::size_t>(tag) >= v.size())
        throw error(std::string(who()) + ": tag " + std::to_string(tag) + " is outside [0, " + std::to_string(v.size()) + ")");
    return v[static_cast<std::size_t>(tag)];
}

//! What a link or channel (`who`) throws when a message part (`part`: "header", "body") of `tag`
//! has `got` bytes ("more" where the engine only says it was longer) where `expected` were due;
//! `from` names the sender ("process 3"), or is empty where `who` names it already.
inline error size_mismatch(const std::string& who, const char* part, int tag, const std::string& from, const std::string& got,
                           std::size_t expected)
{
    return error(who + ": the payload " + part + " of tag " + std::to_string(tag) + (from.empty() ? "" : " from " + from) + " has " +
                 got + " bytes, but this process expects " + std::to_string(expected) +
                 " (the two ends disagree on the payload type or its payload_traits)");
}
} // namespace detail

} // namespace tpipe
