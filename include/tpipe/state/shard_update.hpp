#pragma once
// tpipe::shard_update: the optimizer step that tpipe::sharded_optimizer
// (tpipe/state/sharded_optimizer.hpp) runs on one member's shard of a flat parameter buffer.
//
//   update(params, grads, first)   params: the shard's parameters, updated in place;
//                                  grads:  the shard's summed gradients (over every replica,
//                                          not yet averaged), which it may also modify;
//                                  first:  the shard's first element in the flat buffer (to
//                                          find per-parameter settings, e.g. no weight decay).
//
// The update keeps its own state (AdamW moments...) for exactly the shard's elements: that is
// the 1/D of the optimizer state a member holds.
#include <concepts>
#include <cstddef>
#include <span>

namespace tpipe {

//! A callable that steps one shard of parameters of type T (see the file comment).
template <class F, class T>
concept shard_update = std::invocable<F&, std::span<T>, std::span<T>, std::size_t>;

} // namespace tpipe
