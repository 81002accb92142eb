#pragma once
// tpipe::cuda::device_payload_traits<T>: how a stage payload whose body lives in GPU memory
// crosses a boundary by a device copy (tpipe/cuda/peer_channel.hpp) or NCCL
// (tpipe/nccl/basic_channel.hpp): the device-memory counterpart of tpipe::payload_traits
// (tpipe/transport/payload_traits.hpp). No CUDA include. A payload travels as
//
//   header  a small trivially copyable value describing the shape (at most
//           max_device_header_bytes), sent first, so that the receiver can allocate;
//   body    one contiguous range of device memory inside the object, sent and received in
//           place (no staging copy).
//
//   template <> struct tpipe::cuda::device_payload_traits<my_act> {
//     struct header { std::int64_t rows, width; };
//     static header header_of(const my_act& a);
//     template <class Pool> static my_act make(const header& h, Pool& pool); // receiver: from its pool
//     static std::span<const std::byte> device_bytes(const my_act& a);     // sender's body
//     static std::span<std::byte> device_bytes(my_act& a);                 // where the body goes
//   };
//
// `Pool` is what the transport was given for the receiving side (e.g. a tpipe::cuda::memory_pool
// with the receiving GPU and stream): make(h, pool) allocates there, so a steady state allocates
// nothing from the driver. make(h) must give a body of the size the sender's had: the receiver
// checks it against the size announced and refuses a mismatch.
#include <concepts>
#include <cstddef>
#include <span>

#include "tpipe/transport/payload_traits.hpp"

namespace tpipe::cuda {

template <class T>
struct device_payload_traits;

//! Room for a payload header (NCCL sends it in a fixed-size envelope: tpipe/nccl/detail/receive_lane.hpp).
inline constexpr std::size_t max_device_header_bytes = 40;

//! A payload with a device form: device_payload_traits<T> is specialised as described above (its
//! header part is the host traits' too: tpipe::payload_header_traits).
template <class T, class Pool>
concept device_payload =
    payload_header_traits<device_payload_traits<T>, T> &&
    (sizeof(typename device_payload_traits<T>::header) <= max_device_header_bytes) &&
    requires(const T& c, T& m, const typename device_payload_traits<T>::header& h, Pool& pool) {
        { device_payload_traits<T>::make(h, pool) } -> std::same_as<T>;
        { device_payload_traits<T>::device_bytes(c) } -> std::same_as<std::span<const std::byte>>;
        { device_payload_traits<T>::device_bytes(m) } -> std::same_as<std::span<std::byte>>;
    };

} // namespace tpipe::cuda
