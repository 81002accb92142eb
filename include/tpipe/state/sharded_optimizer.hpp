#pragma once
// tpipe::sharded_optimizer: ZeRO-1 (Megatron's distributed optimizer) over the D replicas of a
// data-parallel group. Each replica holds the whole parameters and gradients of its stage as
// flat buffers of n elements, but only member r's shard (tpipe::ring_segment(n, D, r)) of the
// optimizer state. One step:
//   1. reduce_scatter_sum(grads): member r's shard of grads becomes the sum over replicas;
//   2. update(params shard, grads shard, first): the user's optimizer steps that shard;
//   3. all_gather(params): every member gets every shard's new parameters.
//
//   tpipe::sharded_optimizer<float, tpipe::thread_communicator> zero(replicas, n);
//   std::vector<float> m(zero.shard().size), v(zero.shard().size);      // 1/D of AdamW's state
//   co_await zero.step(params, grads, [&](std::span<float> p, std::span<float> g, std::size_t) {
//       for (std::size_t k = 0; k < p.size(); ++k) adamw(p[k], g[k] / D, m[k], v[k]);
//   });
//
// Equality with the replicated optimizer (all_reduce_sum of the gradients, then the same update
// on all n elements on every replica):
// - Bitwise, when the replicated run's all-reduce uses reduction_order::ring (the default of
//   tpipe's thread and MPI communicators) and the update is elementwise: each element's new
//   value depends only on that element's parameter, summed gradient and state (AdamW, SGD with
//   momentum, Adam; with the same compiler flags, no -ffast-math). The shard's summed gradients
//   are then the all-reduce's bits (tpipe/comm/reduce_scatter_communicator.hpp), and the
//   all-gather copies bits.
// - Not bitwise, in general, for updates that read the whole buffer: a global gradient-norm clip
//   or LAMB's trust ratio need a norm over all shards, which the user computes from per-shard
//   partial sums (an all_reduce_sum of one value) in another order than a replicated loop.
// - Traffic: reduce-scatter + all-gather move what one ring all-reduce moves, 2 n (D - 1) / D
//   elements per member: ZeRO-1 costs no extra communication.
#include <cstddef>
#include <span>
#include <string>

#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/state/shard_update.hpp"

namespace tpipe {

template <class T, reduce_scatter_communicator C>
class sharded_optimizer {
public:
    //! The members of `replicas` each hold a flat buffer of `n` parameters (the same n).
    //! `replicas` must outlive this object.
    sharded_optimizer(C& replicas, std::size_t n) : c_(&replicas), n_(n), shard_(ring_segment(n, replicas.size(), replicas.rank())) {}

    //! This member's elements of the flat buffer: the ones it keeps optimizer state for.
    element_range shard() const noexcept { return shard_; }
    std::size_t size() const noexcept { return n_; }

    //! One step (every member calls it, like a collective). `grads` holds this replica's
    //! gradients and is used as the reduction buffer: afterwards its shard holds the summed
    //! gradients and the rest partial sums. `params` ends the same on every member.
    template <shard_update<T> F>
    task<void> step(std::span<T> params, std::span<T> grads, F update)
    {
        check(params.size(), "params");
        check(grads.size(), "grads");
        co_await c_->reduce_scatter_sum(grads);
        update(params.subspan(shard_.begin, shard_.size), grads.subspan(shard_.begin, shard_.size), shard_.begin);
        co_await c_->all_gather(params);
    }

private:
    void check(std::size_t got, const char* what) const
    {
        if (got != n_)
            throw invalid_argument("sharded_optimizer::step: " + std::string(what) + " has " + std::to_string(got) +
                                   " elements, but the optimizer was built for " + std::to_string(n_) +
                                   " (the same flat buffer on every replica)");
    }

    C* c_;
    std::size_t n_;
    element_range shard_;
};

} // namespace tpipe
