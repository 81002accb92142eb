#pragma once
// tpipe::device_payload_traits<T>: how a stage payload whose body lives in device (GPU) memory
// crosses a boundary, by NCCL (tpipe/nccl/link.hpp) or by a CUDA peer copy
// (tpipe/cuda/peer_link.hpp): the device-memory counterpart of tpipe::payload_traits
// (tpipe/transport/payload_traits.hpp). No CUDA include. A payload travels as
//
//   header  a small trivially copyable value describing the shape (at most
//           max_device_header_bytes), sent first, so that the receiver can allocate;
//   body    one contiguous range of device memory inside the object, sent and received in
//           place (no staging copy).
//
//   template <> struct tpipe::device_payload_traits<my_act> {
//     struct header { std::int64_t rows, width; };
//     using pool = my_pool;                                            // what a receiver allocates from
//     static header header_of(const my_act& a);
//     static my_act make(const header& h, my_pool& pool);              // receiver: from its pool
//     static std::span<const std::byte> device_bytes(const my_act& a); // sender's body
//     static std::span<std::byte> device_bytes(my_act& a);             // where the body goes
//   };
//
// The pool is what the transport was given for the receiving side (e.g. a tpipe::cuda::memory_pool
// with the receiving GPU and stream): make(h, pool) allocates there, so a steady state allocates
// nothing from the driver. make(h, pool) must give a body of the size the sender's had: the
// receiver checks it against the size announced and refuses a mismatch. `pool` names its type, so
// that the typed channel over any device link (tpipe::linked_channel) can ask the link for it
// (device_pool_ref) without knowing the transport.
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <type_traits>
#include <typeinfo>

#include "tpipe/core/demangle.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/transport/payload_traits.hpp"

namespace tpipe {

template <class T>
struct device_payload_traits;

//! Room for a payload header (NCCL sends it in a fixed-size envelope: tpipe/nccl/detail/receive_lane.hpp).
inline constexpr std::size_t max_device_header_bytes = 40;

//! A payload with a device form made from a `Pool`: device_payload_traits<T> is specialised as
//! described above (its header part is the host traits' too: tpipe::payload_header_traits).
template <class T, class Pool>
concept device_payload =
    payload_header_traits<device_payload_traits<T>, T> &&
    (sizeof(typename device_payload_traits<T>::header) <= max_device_header_bytes) &&
    requires(const T& c, T& m, const typename device_payload_traits<T>::header& h, Pool& pool) {
        { device_payload_traits<T>::make(h, pool) } -> std::same_as<T>;
        { device_payload_traits<T>::device_bytes(c) } -> std::same_as<std::span<const std::byte>>;
        { device_payload_traits<T>::device_bytes(m) } -> std::same_as<std::span<std::byte>>;
    };

//! A device payload whose traits name the pool it is made from (`using pool = ...`): what a
//! device link (NCCL) carries.
template <class T>
concept pooled_device_payload =
    requires { typename device_payload_traits<T>::pool; } && device_payload<T, typename device_payload_traits<T>::pool>;

//! The pool a device link's receivers make payloads from, its type kept: a link holds it for
//! payload types it does not know, and the channel of each type asks for the pool that type's
//! traits name.
class device_pool_ref {
public:
    template <class Pool>
        requires(!std::same_as<std::remove_const_t<Pool>, device_pool_ref>)
    explicit device_pool_ref(Pool& p) noexcept : object_(&p), type_(&typeid(Pool))
    {
    }

    //! The pool as `Pool`, or an error naming both types (`who` names the link and payload).
    template <class Pool>
    Pool& as(const std::string& who) const
    {
        if (*type_ != typeid(Pool))
            throw invalid_argument(who + ": the payload's device_payload_traits make it from a pool of type " +
                                   detail::readable_name(typeid(Pool)) + ", but the transport was given a pool of type " +
                                   detail::readable_name(*type_) +
                                   " (give the transport the pool its payloads name)");
        return *static_cast<Pool*>(object_);
    }

private:
    void* object_;
    const std::type_info* type_;
};

} // namespace tpipe
