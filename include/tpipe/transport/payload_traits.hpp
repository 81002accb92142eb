#pragma once
// tpipe::payload_traits<T>: how a payload in host memory becomes bytes and back, for the
// transports that leave the process through the host (MPI). Payloads in GPU memory, which NCCL and
// CUDA peer copies move, have their own trait (tpipe::device_payload_traits) sharing the header
// part below. A local channel moves the object and needs no trait. A payload travels as two parts:
//
//   header  a small trivially copyable value describing the shape (element count, rows x tokens,
//           dtype...), sent first, so that the receiver can allocate the object;
//   body    one contiguous byte range inside the object, sent and received in place (no copy
//           through a staging buffer).
//
//   template <> struct tpipe::payload_traits<my_act> {
//     struct header { std::int64_t rows, tokens, width; };
//     static header header_of(const my_act& a);                 // sender: the shape
//     static my_act make(const header& h);                      // receiver: an object of that shape
//     static std::span<const std::byte> bytes(const my_act& a); // sender: the body
//     static std::span<std::byte> bytes(my_act& a);             // receiver: where the body goes
//   };
//
// make(h) must give an object whose bytes() has the size bytes(original) had: the receiver checks
// it against the message that arrives and refuses a mismatch.
//
// Provided: std::vector<T> of a trivially copyable T (header: the element count). Its make(h)
// takes a recycled vector of that size from tpipe::payload_pool when there is one (its old
// contents are overwritten by the body), else a new one; recycle(v) gives it back
// (tpipe/transport/recyclable_payload.hpp).
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/transport/payload_pool.hpp"
#include "tpipe/transport/payload.hpp"

namespace tpipe {

//! Specialise for a payload type that must cross processes (see the header comment).
template <class T>
struct payload_traits;

//! What every payload trait says first, whichever memory its body lives in (this one: host;
//! tpipe::device_payload_traits: device): a trivially copyable header, and the header of an
//! object. The traits stay two, named for their memory, so that a device payload never reaches a
//! host transport by a tag left out.
template <class Traits, class T>
concept payload_header_traits = payload<T> && requires { typename Traits::header; } &&
                                std::is_trivially_copyable_v<typename Traits::header> && requires(const T& c) {
                                    { Traits::header_of(c) } -> std::same_as<typename Traits::header>;
                                };

//! A payload with a byte form: payload_traits<T> is specialised as described above.
template <class T>
concept byte_payload =
    payload_header_traits<payload_traits<T>, T> &&
    requires(const T& c, T& m, const typename payload_traits<T>::header& h) {
        { payload_traits<T>::make(h) } -> std::same_as<T>;
        { payload_traits<T>::bytes(c) } -> std::same_as<std::span<const std::byte>>;
        { payload_traits<T>::bytes(m) } -> std::same_as<std::span<std::byte>>;
    };

namespace detail {
template <class T>
inline constexpr bool holds_addresses =
    std::is_pointer_v<T> || std::is_member_pointer_v<T> || std::is_null_pointer_v<T>;
template <class>
inline constexpr bool no_byte_form = false;
} // namespace detail

template <class T>
    requires std::is_trivially_copyable_v<T> && (!detail::holds_addresses<T>)
struct payload_traits<std::vector<T>> {
    static constexpr bool tpipe_recyclable_payload = true;  // recycle below (tpipe/transport/recyclable_payload.hpp)
    struct header {
        std::uint64_t count;
    };
    static header header_of(const std::vector<T>& v) { return {static_cast<std::uint64_t>(v.size())}; }
    static std::vector<T> make(const header& h)
    {
        const auto n = static_cast<std::size_t>(h.count);
        if (auto v = payload_pool<std::vector<T>>::global().take(n * sizeof(T))) return std::move(*v);
        return std::vector<T>(n);
    }
    static void recycle(std::vector<T>&& v)
    {
        const std::size_t bytes = v.size() * sizeof(T);
        payload_pool<std::vector<T>>::global().give(std::move(v), bytes);
    }
    static std::span<const std::byte> bytes(const std::vector<T>& v) { return std::as_bytes(std::span<const T>(v)); }
    static std::span<std::byte> bytes(std::vector<T>& v) { return std::as_writable_bytes(std::span<T>(v)); }
};

//! Pointers are trivially copyable, but their bytes mean nothing in another process: refused
//! with a sentence where a transport needs the byte form.
template <class T>
    requires detail::holds_addresses<T>
struct payload_traits<std::vector<T>> {
    static_assert(detail::no_byte_form<T>,
                  "tpipe::payload_traits<std::vector<T>>: T is a pointer; a pointer is an address in this process, "
                  "and sent to another process it points nowhere. Send the values (std::vector<double>, not "
                  "std::vector<double*>), or indices, or specialise tpipe::payload_traits for a type that owns them.");
};

} // namespace tpipe
