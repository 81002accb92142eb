#pragma once
// tpipe::every_member: one value from every member of a communicator, in rank order, by an
// all-gather (member r's segment of a buffer of size() elements is element r). What a trainer
// needs to agree on a few numbers: the largest stop signal, whether every member passed a check,
// the replicas' losses added in a fixed order.
//
//   const std::vector<std::int32_t> all = co_await tpipe::every_member(world, std::int32_t{signal});
#include <cstdint>
#include <span>
#include <vector>

#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/exec/task.hpp"

namespace tpipe {

//! T: float, double, std::int32_t or std::int64_t (what all_gather carries).
template <class T, reduce_scatter_communicator C>
task<std::vector<T>> every_member(C& c, T mine)
{
    std::vector<T> all(static_cast<std::size_t>(c.size()), T{});
    all[static_cast<std::size_t>(c.rank())] = mine;
    co_await c.all_gather(std::span<T>(all));
    co_return all;
}

} // namespace tpipe
