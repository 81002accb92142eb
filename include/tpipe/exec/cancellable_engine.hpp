#pragma once
// tpipe::cancellable_engine: an engine whose computes can wait for something outside its loops
// (a GPU stream) and can therefore be interrupted. The engine opts in explicitly:
//
//   static constexpr bool tpipe_cancellable_engine = true;  // in the class (inherited), or
//   template <> inline constexpr bool tpipe::enable_cancellable_engine<my_engine> = true;
//
// and then must have
//   void cancel() noexcept;        // any thread: every waiting compute resumes with operation_cancelled
//   void reset_cancel() noexcept;  // before the next iteration: computes may wait again
//
// An engine that declares it with another signature (or a misspelled name) does not compile:
// tpipe::run names the member and the signature expected. Default (not declared, like
// tpipe::cpu_engine, whose computes never wait): cancelling an iteration interrupts the waits
// of channels and hooks only. Model: tpipe::cuda::engine.
#include <concepts>

#include "tpipe/exec/engine.hpp"

namespace tpipe {

//! Whether E declares the capability (see above): its tpipe_cancellable_engine, else false; or specialised.
template <class E>
inline constexpr bool enable_cancellable_engine = requires { requires E::tpipe_cancellable_engine; };

//! An engine that declares enable_cancellable_engine and has its two members.
template <class E>
concept cancellable_engine = engine<E> && enable_cancellable_engine<E> && requires(E& e) {
    { e.cancel() } noexcept -> std::same_as<void>;
    { e.reset_cancel() } noexcept -> std::same_as<void>;
};

namespace detail {
//! True; a compile error naming the member when E declares the capability with a wrong member.
template <class E>
consteval bool check_cancellable_engine()
{
    if constexpr (enable_cancellable_engine<E>) {
        static_assert(requires(E& e) {
            { e.cancel() } noexcept -> std::same_as<void>;
        }, "this engine declares tpipe::enable_cancellable_engine, so it must have `void cancel() noexcept`");
        static_assert(requires(E& e) {
            { e.reset_cancel() } noexcept -> std::same_as<void>;
        }, "this engine declares tpipe::enable_cancellable_engine, so it must have `void reset_cancel() noexcept`");
    }
    return true;
}
} // namespace detail

//! Interrupts the computes of `e` that wait (cancellable_engine); otherwise nothing to do.
template <engine E>
void cancel_computes(E& e) noexcept
{
    static_assert(detail::check_cancellable_engine<E>());
    if constexpr (cancellable_engine<E>) e.cancel();
}

//! Lets the computes of `e` wait again after cancel_computes (cancellable_engine); otherwise nothing.
template <engine E>
void reset_cancel_computes(E& e) noexcept
{
    static_assert(detail::check_cancellable_engine<E>());
    if constexpr (cancellable_engine<E>) e.reset_cancel();
}

} // namespace tpipe
