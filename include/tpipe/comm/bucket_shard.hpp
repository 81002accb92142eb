#pragma once
// tpipe::bucket_shard: which elements of a gradient buffer one data-parallel member owns when the
// buffer is reduce-scattered bucket by bucket (tpipe::data_parallel with shard = true, Megatron's
// distributed optimizer): the buffer of n elements is cut into buckets of `bucket` elements (the
// last may be shorter), and each bucket into ring segments (tpipe::ring_segment); member r owns
// segment r of every bucket. Reduce-scattering and all-gathering the same buckets is then bitwise
// the bucketed all-reduce of a replicated optimizer (tpipe/comm/reduce_scatter_communicator.hpp).
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/core/error.hpp"

namespace tpipe {

//! Member `rank`'s elements of n, in order; empty segments are left out.
inline std::vector<element_range> bucket_shard(std::size_t n, std::size_t bucket, int members, int rank)
{
    if (bucket == 0 || members < 1 || rank < 0 || rank >= members)
        throw invalid_argument("bucket_shard: need a bucket of at least one element and 0 <= rank < members, got bucket " +
                               std::to_string(bucket) + ", rank " + std::to_string(rank) + " of " + std::to_string(members));
    std::vector<element_range> out;
    for (std::size_t at = 0; at < n; at += bucket) {
        const element_range seg = ring_segment(std::min(bucket, n - at), members, rank);
        if (seg.size > 0) out.push_back({at + seg.begin, seg.size});
    }
    return out;
}

} // namespace tpipe
