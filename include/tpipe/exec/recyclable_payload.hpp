#pragma once
// tpipe::recyclable_payload: the opt-in capability of a byte payload (tpipe/exec/payload_traits.hpp)
// to be recycled once a transport no longer needs it: payload_traits<T>::recycle(T&&) hands the
// object to its tpipe::payload_pool (tpipe/exec/payload_pool.hpp), and payload_traits<T>::make(h)
// takes bodies from there. tpipe::mpi::channel recycles every payload whose send completed.
// std::vector<T> of a trivially copyable T opts in.
#include "tpipe/exec/payload_traits.hpp"

namespace tpipe {

//! A byte payload whose traits take their objects back for reuse (see the file comment).
template <class T>
concept recyclable_payload = byte_payload<T> && requires(T&& v) { payload_traits<T>::recycle(static_cast<T&&>(v)); };

//! Gives a payload this process no longer needs back to its pool (e.g. a last stage's input).
template <recyclable_payload T>
void recycle(T&& v)
{
    payload_traits<T>::recycle(static_cast<T&&>(v));
}

} // namespace tpipe
