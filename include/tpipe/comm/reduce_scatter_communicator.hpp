#pragma once
// tpipe::reduce_scatter_communicator: the opt-in capability of a communicator to run the two
// halves of a ring all-reduce on their own, what a sharded (ZeRO-1) optimizer needs
// (tpipe/state/sharded_optimizer.hpp). Models: tpipe::thread_communicator and
// tpipe::mpi::communicator. Not NCCL's: ncclReduceScatter needs equal segments, and its
// order is NCCL's.
//
// Semantics (in place, on a buffer of the same n elements on every member; float, double,
// std::int32_t, std::int64_t; segments as tpipe::ring_segment(n, size(), s) defines them)
// - reduce_scatter_sum(values): afterwards member r's segment r holds the sum of every member's
//   segment r, in the ring order (tpipe/comm/reduction_order.hpp): bitwise what all_reduce_sum
//   gives there under reduction_order::ring. The other segments hold unspecified values.
// - all_gather(values): afterwards every member's segment s is a copy of member s's segment s.
// - So reduce_scatter_sum then all_gather is bitwise all_reduce_sum in the ring order, whatever
//   reduction_order the communicator's all_reduce_sum uses.
// - Like every collective: called by every member, in the same order, with the same sizes.
#include <cstdint>
#include <span>

#include "tpipe/comm/communicator.hpp"

namespace tpipe {

//! A communicator that also reduce-scatters and all-gathers (see the file comment).
template <class C>
concept reduce_scatter_communicator =
    communicator<C> && requires(C& c, std::span<float> f, std::span<double> d, std::span<std::int32_t> i, std::span<std::int64_t> l) {
        { c.reduce_scatter_sum(f) } -> awaitable_of<void>;
        { c.reduce_scatter_sum(d) } -> awaitable_of<void>;
        { c.all_gather(f) } -> awaitable_of<void>;
        { c.all_gather(d) } -> awaitable_of<void>;
        { c.all_gather(i) } -> awaitable_of<void>;
        { c.all_gather(l) } -> awaitable_of<void>;
    };

} // namespace tpipe
