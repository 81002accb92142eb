#pragma once
// The channel concept: how a payload travels from one stage to the next (activations forward,
// gradients backward). Implementations: tpipe::local_channel (same process, moves the payload);
// later MPI, CUDA-peer and NCCL channels satisfy the same concept.
//
// Semantics
// - A channel carries payloads of one type in one direction between two stages.
// - Every message carries a tag: the dense index of the unit (scheme::index) it belongs to. Each
//   tag is sent at most once and received at most once per iteration. Channels over ordered
//   transports (NCCL) may require receives in the order of the sends; the lowered programs of
//   tpipe's schedules send and receive each boundary's units in the same order on both sides.
// - send(tag, value) is eager: the payload is handed to the channel when send is called; the
//   returned awaitable completes when the sender may reuse its resources (at once for a local
//   channel). A send never waits for the receiver.
// - recv(tag) returns an awaitable that completes with the payload once it has arrived; the
//   awaiting coroutine resumes on the loop it suspended on.
// - cancel() makes every pending and future receive of the current iteration complete by
//   throwing tpipe::operation_cancelled. reset(tags) starts a new iteration with room for `tags`
//   messages; call it only when no receive is pending.
#include <concepts>
#include <coroutine>
#include <type_traits>
#include <utility>

#include "tpipe/exec/stage.hpp"

namespace tpipe {

//! An awaiter: await_ready/await_suspend/await_resume, resuming with an R.
template <class A, class R>
concept awaiter_of = requires(A& a, std::coroutine_handle<> h) {
    { a.await_ready() } -> std::convertible_to<bool>;
    a.await_suspend(h);
    { a.await_resume() } -> std::convertible_to<R>;
};

//! Something `co_await` accepts that resumes with an R: an awaiter, or a type whose member
//! operator co_await returns one.
template <class A, class R>
concept awaitable_of =
    awaiter_of<std::remove_cvref_t<A>, R> || requires(A&& a) {
        { std::forward<A>(a).operator co_await() } -> awaiter_of<R>;
    };

//! A channel of payloads of type value_type (see the semantics above).
template <class C>
concept channel = payload<typename C::value_type> &&
                  requires(C& c, int tag, typename C::value_type&& v) {
                      { c.send(tag, std::move(v)) } -> awaitable_of<void>;
                      { c.recv(tag) } -> awaitable_of<typename C::value_type>;
                      c.cancel();
                      c.reset(tag);
                  };

} // namespace tpipe
