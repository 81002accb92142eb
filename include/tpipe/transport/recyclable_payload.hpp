#pragma once
// tpipe::recyclable_payload: the opt-in capability of a byte payload (tpipe/transport/payload_traits.hpp)
// to be recycled once a transport no longer needs it: payload_traits<T>::recycle(T&&) hands the
// object to its tpipe::payload_pool (tpipe/transport/payload_pool.hpp), and payload_traits<T>::make(h)
// takes bodies from there. tpipe::linked_channel recycles every payload whose send completed.
// The traits opt in explicitly, like the other optional capabilities:
//
//   static constexpr bool tpipe_recyclable_payload = true;  // in payload_traits<T>, or
//   template <> inline constexpr bool tpipe::enable_recyclable_payload<my_act> = true;
//
// and then must have `static void recycle(T&&)`. Declared with another signature, or a recycle
// without the declaration, does not compile where a transport uses the traits (a sentence names
// the member): a misspelt opt-in never silently turns recycling off. std::vector<T> of a
// trivially copyable T opts in.
#include "tpipe/transport/payload_traits.hpp"

namespace tpipe {

//! Whether payload_traits<T> declares the capability: its tpipe_recyclable_payload, else false;
//! or specialised.
template <class T>
inline constexpr bool enable_recyclable_payload = requires { requires payload_traits<T>::tpipe_recyclable_payload; };

namespace detail {
template <class T>
concept has_recycle = requires(T&& v) { payload_traits<T>::recycle(static_cast<T&&>(v)); };
template <class T>
concept names_recycle = requires { &payload_traits<T>::recycle; } || has_recycle<T>;
} // namespace detail

//! A byte payload whose traits declare that they take their objects back for reuse (see above).
template <class T>
concept recyclable_payload = byte_payload<T> && enable_recyclable_payload<T> && detail::has_recycle<T>;

namespace detail {
//! True; a compile error naming the member when payload_traits<T> declares recycling without a
//! recycle(T&&), or has a recycle without declaring it.
template <class T>
consteval bool check_recyclable_payload()
{
    if constexpr (enable_recyclable_payload<T>)
        static_assert(has_recycle<T>, "tpipe::payload_traits<T> (T above) declares tpipe::enable_recyclable_payload, so "
                                      "it must have `static void recycle(T&&)`");
    else if constexpr (requires { typename payload_traits<T>::header; })  // traits exist (else: no byte form)
        static_assert(!names_recycle<T>,
                      "tpipe::payload_traits<T> (T above) has a member `recycle` but does not declare "
                      "`static constexpr bool tpipe_recyclable_payload = true;`: recycling is an explicit opt-in "
                      "(tpipe/transport/recyclable_payload.hpp); declare it, or remove recycle");
    return true;
}
} // namespace detail

//! Gives a payload this process no longer needs back to its pool (e.g. a last stage's input).
//! A payload whose traits do not declare recycling is a compile error with a sentence.
template <class T>
    requires byte_payload<T>
void recycle(T&& v)
{
    static_assert(detail::check_recyclable_payload<T>());
    static_assert(enable_recyclable_payload<T>, "tpipe::recycle: payload_traits<T> (T above) does not declare "
                                                "recycling (tpipe/transport/recyclable_payload.hpp)");
    payload_traits<T>::recycle(static_cast<T&&>(v));
}

} // namespace tpipe
