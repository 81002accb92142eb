#pragma once
// tpipe::local_connecting_transport: a transport that picks the channel of a boundary whose two
// ranks both run in this process (tpipe::cuda::peer_transport: device copies between GPUs of
// one process). The transport opts in explicitly:
//
//   static constexpr bool tpipe_local_connecting_transport = true;  // in the class (inherited), or
//   template <> inline constexpr bool tpipe::enable_local_connecting_transport<my_transport> = true;
//
// and then must have, for every payload type T it carries (channel_type<T> names a channel),
//   template <class T> std::unique_ptr<channel_type<T>> connect_local(const endpoint& e);
// (e.sending is true: the channel has both ends here). A transport that declares it with another
// signature (or a misspelled name) does not compile: tpipe::run names the member and the
// signature expected. Default (not declared: tpipe::local_transport, tpipe::mpi::transport,
// tpipe::nccl::transport): such a boundary gets a tpipe::local_channel, the payload moves.
#include <concepts>
#include <memory>

#include "tpipe/transport/transport.hpp"

namespace tpipe {

//! Whether X declares the capability (see above): its tpipe_local_connecting_transport, else false; or specialised.
template <class X>
inline constexpr bool enable_local_connecting_transport = requires { requires X::tpipe_local_connecting_transport; };

//! A transport that declares enable_local_connecting_transport and makes its own channel for
//! payloads of type T between two ranks of this process.
template <class X, class T>
concept local_connecting_transport =
    transport<X> && has_channel_type_for<X, T> && enable_local_connecting_transport<X> && requires(X& x, const endpoint& e) {
        { x.template connect_local<T>(e) } -> std::same_as<std::unique_ptr<typename X::template channel_type<T>>>;
    };

namespace detail {
//! True; a compile error naming the member when X declares the capability and carries T but its
//! connect_local<T> is missing or has another type.
template <class X, class T>
consteval bool check_local_connecting_transport()
{
    if constexpr (enable_local_connecting_transport<X> && has_channel_type_for<X, T>)
        static_assert(requires(X& x, const endpoint& e) {
            { x.template connect_local<T>(e) } -> std::same_as<std::unique_ptr<typename X::template channel_type<T>>>;
        }, "this transport declares tpipe::enable_local_connecting_transport, so it must have `template <class T> "
           "std::unique_ptr<channel_type<T>> connect_local(const tpipe::endpoint&)` for every T its channel_type carries");
    return true;
}
} // namespace detail

} // namespace tpipe
