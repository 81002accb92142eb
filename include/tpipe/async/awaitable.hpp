#pragma once
// What co_await accepts, as concepts: the channels', communicators' and engines' operations are
// checked against them (transport/channel.hpp, comm/communicator.hpp, exec/engine.hpp).
#include <concepts>
#include <coroutine>
#include <type_traits>
#include <utility>

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

} // namespace tpipe
