#pragma once
// tpipe::every_member: one value from every member of a communicator, in rank order, by an
// all-gather (member r's segment of a buffer of size() elements is element r). What a trainer
// needs to agree on a few numbers: the largest stop signal, whether every member passed a check,
// the replicas' losses added in a fixed order (replica_mean).
//
//   const std::vector<std::int32_t> all = co_await tpipe::every_member(world, std::int32_t{signal});
#include <cstdint>
#include <span>
#include <vector>

#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/async/task.hpp"

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

//! The mean over `replicas` replicas of a value their pipeline ranks hold, with rank r of replica
//! d on member d * ranks + r (tpipe::layout::one_rank_per_process; members past ranks * replicas
//! are left out): each replica's value is its ranks' sum (a loss: the last rank's, the others add
//! zeros), and the replicas' are added in index order, each divided by `replicas`. That is the
//! order a trainer with its replicas on threads adds them in, so both print the same bits.
template <reduce_scatter_communicator C>
task<double> replica_mean(C& c, double mine, int ranks, int replicas)
{
    const std::vector<double> all = co_await every_member(c, mine);
    double mean = 0;
    for (int d = 0; d < replicas; ++d) {
        double replica = 0;
        for (int r = 0; r < ranks; ++r) replica += all[static_cast<std::size_t>(d * ranks + r)];
        mean += replica / replicas;
    }
    co_return mean;
}

} // namespace tpipe
