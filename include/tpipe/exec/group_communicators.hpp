#pragma once
// tpipe::split_groups: every group's communicator of one coordinate of a tpipe::layout, split from
// one parent communicator in one call (any tpipe::communicator: threads, MPI, NCCL).
//
//   tpipe::thread_group all(l.sizes().size());                // threads: member l.index(c) runs c
//   auto g = tpipe::split_groups(all.member(l.index(c)), l, c); // from c's own thread
//   co_await g.tensor.all_reduce_sum(partial);                 // over (c.replica, c.rank)'s tensor ranks
//
//   auto world = tpipe::mpi::communicator::world();            // MPI: one coordinate per process
//   auto g = tpipe::split_groups(world, l, l.coordinates_of(world.rank()).front());
//
// Collective over the parent (split() is): each of its members calls it once, for a different
// coordinate, so the parent has exactly t * K * d members. A group's communicator ranks its
// members by layout::position (tensor rank, replica, rank).
#include <string>
#include <type_traits>
#include <utility>

#include "tpipe/comm/communicator.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/exec/layout.hpp"

namespace tpipe {

//! The three groups of one coordinate (see tpipe/exec/layout.hpp).
template <communicator C>
struct group_communicators {
    C tensor;    //!< the tensor ranks of this (replica, rank)
    C data;      //!< the replicas of this (rank, tensor rank)
    C pipeline;  //!< the pipeline ranks of this (replica, tensor rank)
};

template <communicator C>
group_communicators<C> split_groups(C& parent, const layout& l, const coordinate& me)
{
    if (parent.size() != l.sizes().size())
        throw invalid_argument("split_groups: the parent communicator has " + std::to_string(parent.size()) +
                               " members, but the layout's " + l.sizes().text() + " have " + std::to_string(l.sizes().size()) +
                               " coordinates; each coordinate's member calls split_groups once");
    l.index(me);  // refuses a coordinate outside the layout before any member waits in a split
    auto split = [&](group_kind k) { return parent.split(l.colour(k, me), l.position(k, me)); };
    C tensor = split(group_kind::tensor);
    C data = split(group_kind::data);
    C pipeline = split(group_kind::pipeline);
    return {std::move(tensor), std::move(data), std::move(pipeline)};
}
//! The same from a parent passed by value (thread_group::member(i) returns one).
template <communicator C>
group_communicators<C> split_groups(C&& parent, const layout& l, const coordinate& me)
    requires(!std::is_lvalue_reference_v<C>)
{
    return split_groups(parent, l, me);
}

} // namespace tpipe
