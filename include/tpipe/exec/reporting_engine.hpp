#pragma once
// tpipe::reporting_engine: an engine that can say what a compute of a device waits for, for the
// watchdog's report (tpipe::watchdog_error). The engine opts in explicitly:
//
//   static constexpr bool tpipe_reporting_engine = true;  // in the class (inherited), or
//   template <> inline constexpr bool tpipe::enable_reporting_engine<my_engine> = true;
//
// and then must have
//   std::string waiting_for(int device) const;  // any thread; empty if nothing waits
//
// An engine that declares it with another signature (or a misspelled name) does not compile:
// tpipe::run names the member and the signature expected. Default (not declared, like
// tpipe::cpu_engine): the report says what each rank waits for in the pipeline only. Model:
// tpipe::cuda::engine.
#include <concepts>
#include <string>

#include "tpipe/exec/engine.hpp"

namespace tpipe {

//! Whether E declares the capability (see above): its tpipe_reporting_engine, else false; or specialised.
template <class E>
inline constexpr bool enable_reporting_engine = requires { requires E::tpipe_reporting_engine; };

//! An engine that declares enable_reporting_engine and has waiting_for.
template <class E>
concept reporting_engine = engine<E> && enable_reporting_engine<E> && requires(const E& e, int device) {
    { e.waiting_for(device) } -> std::same_as<std::string>;
};

namespace detail {
//! True; a compile error naming the member when E declares the capability with a wrong member.
template <class E>
consteval bool check_reporting_engine()
{
    if constexpr (enable_reporting_engine<E>)
        static_assert(requires(const E& e, int device) {
            { e.waiting_for(device) } -> std::same_as<std::string>;
        }, "this engine declares tpipe::enable_reporting_engine, so it must have `std::string waiting_for(int device) const`");
    return true;
}
} // namespace detail

//! What the computes of `device` wait for (reporting_engine); otherwise empty.
template <engine E>
std::string engine_waits(const E& e, int device)
{
    static_assert(detail::check_reporting_engine<E>());
    if constexpr (reporting_engine<E>) return e.waiting_for(device);
    else return (void)e, (void)device, std::string();
}

} // namespace tpipe
