#pragma once
// The channel concept: how a payload travels from one stage to the next (activations forward,
// gradients backward). Models: tpipe::local_channel (same process, moves the payload) and
// tpipe::linked_channel (over a byte link of any engine, tpipe/transport/link.hpp: MPI and UCX
// move host bytes through tpipe::payload_traits, NCCL and the CUDA peer copies between GPUs of
// one process device bytes through tpipe::device_payload_traits). Which one a boundary gets is
// the transport's choice (tpipe/transport/transport.hpp); the runner sees only this concept.
//
// Semantics
// - A channel carries payloads of one type in one direction between two stages.
// - Every message carries a tag: the dense index of the unit (scheme::index) it belongs to. Each
//   tag is sent at most once and received at most once per iteration. Transports may deliver in
//   any order; the lowered programs of tpipe's schedules send and receive each boundary's units
//   in the same order on both sides (ordered transports such as NCCL rely on it).
// - send(tag, value) is eager and takes the payload: it never waits for the receiver. The
//   channel may keep the payload until the transport is done with it (an MPI send in flight);
//   drain() returns an awaitable that completes once every payload sent this iteration has been
//   released, and the runner awaits it before a rank finishes its iteration.
// - post(tag) starts the receive of a tag before anybody waits for it (a remote transport
//   posts its receive, so the transfer overlaps the receiver's compute; a no-op locally).
//   arrival(tag) returns an awaitable that completes once the payload has arrived; ready(tag)
//   says whether it has; take(tag) moves it out. The awaiting coroutine resumes on the loop it
//   suspended on.
// - reset(tags, stop) starts a new iteration with room for `tags` messages; call it only when no
//   receive is pending. Once `stop` is stopped (the iteration failed: any thread), every pending
//   and future arrival and drain of that iteration completes by throwing
//   tpipe::operation_cancelled. A default std::stop_token never stops.
#include <atomic>
#include <optional>
#include <stop_token>
#include <string>
#include <type_traits>
#include <utility>

#include "tpipe/async/awaitable.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/transport/payload.hpp"

namespace tpipe {

//! A channel of payloads of type value_type (see the semantics above).
template <class C>
concept channel = payload<typename C::value_type> &&
                  requires(C& c, const C& cc, int tag, typename C::value_type&& v) {
                      c.send(tag, std::move(v));
                      c.post(tag);
                      { c.arrival(tag) } -> awaitable_of<void>;
                      { cc.ready(tag) } -> std::convertible_to<bool>;
                      { c.take(tag) } -> std::same_as<typename C::value_type>;
                      { c.drain() } -> awaitable_of<void>;
                      c.reset(tag, std::stop_token{});
                  };

namespace detail {
//! take(tag) of a channel model: moves the payload out of a receive slot whose `state` says
//! `full`, and marks the slot `taken`; otherwise (not arrived yet, or taken already) throws a
//! tpipe::error naming the channel `who`.
template <class S, class V>
V take_arrived(std::atomic<S>& state, std::optional<V>& value, std::type_identity_t<S> full,
               std::type_identity_t<S> taken, const char* who, int tag)
{
    if (state.load(std::memory_order_acquire) != full)
        throw error(std::string(who) + ": tag " + std::to_string(tag) + " was taken before it arrived or twice");
    V v = std::move(*value);
    value.reset();
    state.store(taken, std::memory_order_relaxed);
    return v;
}
} // namespace detail

} // namespace tpipe
