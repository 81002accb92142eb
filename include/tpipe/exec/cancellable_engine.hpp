#pragma once
// tpipe::cancellable_engine: an engine whose computes can wait for something outside its loops
// (a GPU stream) and can therefore be interrupted. The engine opts in explicitly:
//
//   static constexpr bool tpipe_cancellable_engine = true;  // in the class (inherited), or
//   template <> inline constexpr bool tpipe::enable_cancellable_engine<my_engine> = true;
//
// and then must have
//   void reset(std::stop_token stop);  // before an iteration: from then on, once `stop` is
//                                      // stopped, every waiting compute resumes with
//                                      // operation_cancelled (a default token never stops)
//
// tpipe::run hands it the iteration's stop token, the one its channels and backward_hook get,
// and a default token once the iteration is over. An engine that declares the capability with
// another signature (or a misspelled name) does not compile: tpipe::run names the member and
// the signature expected. Default (not declared, like tpipe::cpu_engine, whose computes never
// wait): a stopped iteration interrupts the waits of channels and hooks only. Model:
// tpipe::cuda::engine.
#include <concepts>
#include <stop_token>

#include "tpipe/exec/engine.hpp"

namespace tpipe {

//! Whether E declares the capability (see above): its tpipe_cancellable_engine, else false; or specialised.
template <class E>
inline constexpr bool enable_cancellable_engine = requires { requires E::tpipe_cancellable_engine; };

//! An engine that declares enable_cancellable_engine and has its reset.
template <class E>
concept cancellable_engine = engine<E> && enable_cancellable_engine<E> && requires(E& e, std::stop_token t) {
    { e.reset(t) } -> std::same_as<void>;
};

namespace detail {
//! True; a compile error naming the member when E declares the capability with a wrong member.
template <class E>
consteval bool check_cancellable_engine()
{
    if constexpr (enable_cancellable_engine<E>)
        static_assert(requires(E& e, std::stop_token t) {
            { e.reset(t) } -> std::same_as<void>;
        }, "this engine declares tpipe::enable_cancellable_engine, so it must have `void reset(std::stop_token)`");
    return true;
}
} // namespace detail

//! Starts an iteration of e's computes, interrupted once `stop` is stopped (cancellable_engine);
//! otherwise nothing to do.
template <engine E>
void reset_computes(E& e, std::stop_token stop)
{
    static_assert(detail::check_cancellable_engine<E>());
    if constexpr (cancellable_engine<E>) e.reset(std::move(stop));
}

} // namespace tpipe
