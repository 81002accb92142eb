#pragma once
// tpipe::data_parallel: all-reduces each stage's gradients across the stage's replicas, as part
// of tpipe::run. Give it, per stage, the communicator that joins that stage's replicas (one
// member per replica: a tpipe::thread_communicator for replicas on threads, a
// tpipe::mpi::communicator for replicas in processes) and put its hook into run_options:
//
//   tpipe::data_parallel dp(pipe, comm_of_stage, {.average = true});
//   opts.after_backward = dp.hook();
//   tpipe::run(pipe, prog, engine, io, opts);     // gradients summed (averaged) over replicas
//   optimizer.step();                             // every replica the same bits
//
// The all-reduce of a stage starts on the stage's loop as soon as its last backward action of
// the iteration has finished, overlapped with the backward of the stages behind it, in buckets
// of at most options::bucket_bytes (each a collective of its own, issued in the same order on
// every replica). Stages without a member `gradients` and stages without a communicator are
// skipped; a stage whose `gradients` is not what tpipe/exec/gradients.hpp asks for does not
// compile (a sentence names the member). The sum is bitwise identical on every replica (the rank-order fold
// on threads and MPI, NCCL's order on GPUs: tpipe/comm/communicator.hpp); options::average then
// scales by 1 / replicas on every replica alike, on the host, or, with a
// tpipe::averaging_communicator (NCCL: the gradients are device memory the host cannot touch),
// by it (tpipe/comm/averaging_communicator.hpp).
//
// Sharded (options::shard, ZeRO-1 / Megatron's distributed optimizer; the communicator must be a
// tpipe::reduce_scatter_communicator): each bucket is reduce-scattered instead of all-reduced.
// Afterwards this member's segment of every bucket, shard<T>(stage, n) (tpipe/comm/bucket_shard.hpp),
// holds the (averaged) sum, bitwise what the all-reduce leaves there; the other elements hold
// partial sums. Step the owned elements only (the optimizer keeps state for them alone), then
// all_gather(stage, parameters) copies every member's segments to every member, bucket by bucket.
//
//   tpipe::data_parallel dp(pipe, comm_of_stage, {.shard = true});
//   tpipe::run(pipe, prog, engine, io, opts);              // opts.after_backward = dp.hook()
//   for (auto r : dp.shard<float>(s, n)) step(params, grads, r);  // 1/D of the optimizer state
//   co_await dp.all_gather(s, params);                     // every replica the same bits
//
// Failure: the hook hands the iteration's stop token to its communicators (reset), so when the
// iteration fails on a replica, its members are cancelled. Members in other processes learn of
// it through the transport (the runner stops with tpipe::peer_error and stops theirs); members
// on threads of one process (thread_communicator) cancel their whole group, so no replica is
// left waiting in a collective.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <span>
#include <stop_token>
#include <string>
#include <type_traits>
#include <vector>

#include "tpipe/comm/averaging_communicator.hpp"
#include "tpipe/comm/bucket_shard.hpp"
#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/exec/gradients.hpp"
#include "tpipe/exec/pipeline.hpp"
#include "tpipe/exec/run_options.hpp"
#include "tpipe/async/task.hpp"

namespace tpipe {

struct data_parallel_options {
    std::size_t bucket_bytes = std::size_t{4} << 20;  //!< largest span one collective reduces
    bool average = true;                               //!< scale the sum by 1 / replicas
    bool shard = false;  //!< reduce-scatter each bucket instead (see the file comment)
};

template <communicator C>
class data_parallel {
    // A communicator that declares an optional capability must have its members (a sentence names them).
    static_assert(detail::check_averaging_communicator<C>());

public:
    using options = data_parallel_options;

    //! comm_of_stage[s]: the communicator of stage s's replicas, or nullptr (no reduction). Stages
    //! may share one (the stages of one rank, e.g. interleaved): their reductions run one after
    //! another.
    template <pipeline_graph P>
    data_parallel(P& pipe, std::vector<C*> comm_of_stage, options o = {}) : comm_(std::move(comm_of_stage)), opts_(o)
    {
        if (comm_.size() != pipe.size())
            throw invalid_argument("data_parallel: " + std::to_string(comm_.size()) + " communicators for " +
                                   std::to_string(pipe.size()) + " stages; give one per stage (nullptr: none)");
        if (opts_.shard && !reduce_scatter_communicator<C>)
            throw invalid_argument("data_parallel: shard = true needs a communicator that reduce-scatters and all-gathers "
                                   "(tpipe::reduce_scatter_communicator: thread_communicator, mpi::communicator); "
                                   "this one only all-reduces: use shard = false");
        if (opts_.bucket_bytes < sizeof(double))
            throw invalid_argument("data_parallel: bucket_bytes must hold at least one element, got " +
                                   std::to_string(opts_.bucket_bytes));
        grads_.resize(pipe.size());
        pipe.visit_stages([&](std::size_t i, auto& s) {
            using S = std::remove_cvref_t<decltype(s)>;
            static_assert(detail::check_gradients<S>());  // a gradients() of another shape is an error, not skipped
            if constexpr (exposes_gradients<S>) grads_[i] = [&s] { return gradients_of(s); };
        });
        for (C* c : comm_)
            if (c && std::find(distinct_.begin(), distinct_.end(), c) == distinct_.end()) distinct_.push_back(c);
    }

    //! For run_options::after_backward. The data_parallel object must outlive the runs.
    backward_hook hook()
    {
        return backward_hook{
            [this](int stage) { return reduce(stage); },
            [this](std::stop_token stop) {
                for (C* c : distinct_) c->reset(stop);
            },
            "data-parallel all-reduce",
        };
    }

    //! All-reduces (and averages) stage `stage`'s gradients across its replicas.
    task<void> reduce(int stage)
    {
        C* c = comm_.at(static_cast<std::size_t>(stage));
        if (!c || !grads_[static_cast<std::size_t>(stage)] || c->size() == 1) co_return;
        const gradient_view g = grads_[static_cast<std::size_t>(stage)]();
        for (std::span<float> s : g.f32) co_await reduce_span(*c, s);
        for (std::span<double> s : g.f64) co_await reduce_span(*c, s);
    }

    //! The elements of one of stage `stage`'s gradient spans (n elements of T; each span is
    //! bucketed from its own start) whose reduced values this member holds after the reduction:
    //! with shard, its segment of every bucket; else all of them.
    template <class T>
    std::vector<element_range> shard(int stage, std::size_t n) const
    {
        const C* c = comm_.at(static_cast<std::size_t>(stage));
        if (!opts_.shard || !c || c->size() == 1) return {element_range{0, n}};
        return bucket_shard(n, opts_.bucket_bytes / sizeof(T), c->size(), c->rank());
    }

    //! With shard: copies every member's segments of `values` (laid out like stage `stage`'s
    //! gradients of T, e.g. its parameters) to every member, bucket by bucket; only the buckets
    //! that meet `within` (default: all). A collective: every member of the stage calls it alike.
    template <class T>
        requires reduce_scatter_communicator<C>
    task<void> all_gather(int stage, std::span<T> values, element_range within = {0, static_cast<std::size_t>(-1)})
    {
        C* c = comm_.at(static_cast<std::size_t>(stage));
        if (!opts_.shard || !c || c->size() == 1) co_return;
        const std::size_t bucket = opts_.bucket_bytes / sizeof(T);
        const std::size_t first = std::min(within.begin, values.size());
        const std::size_t last = within.size >= values.size() - first ? values.size() : first + within.size;
        for (std::size_t at = first / bucket * bucket; at < last; at += bucket)
            co_await c->all_gather(values.subspan(at, std::min(bucket, values.size() - at)));
    }

private:
    template <class T>
    task<void> reduce_span(C& c, std::span<T> s)
    {
        const std::size_t bucket = opts_.bucket_bytes / sizeof(T);
        const T scale = T(1) / static_cast<T>(c.size());
        for (std::size_t at = 0; at < s.size(); at += bucket) {
            std::span<T> part = s.subspan(at, std::min(bucket, s.size() - at));
            if constexpr (reduce_scatter_communicator<C>) {
                if (opts_.shard) {
                    co_await c.reduce_scatter_sum(part);
                    const element_range mine = ring_segment(part.size(), c.size(), c.rank());
                    if (opts_.average)
                        for (T& x : part.subspan(mine.begin, mine.size)) x *= scale;
                    continue;
                }
            }
            if constexpr (averaging_communicator<C>) {
                if (opts_.average) {
                    co_await c.all_reduce_average(part);
                    continue;
                }
            }
            co_await c.all_reduce_sum(part);
            if (opts_.average)
                for (T& x : part) x *= scale;
        }
    }

    std::vector<C*> comm_;
    std::vector<C*> distinct_;
    options opts_;
    std::vector<std::function<gradient_view()>> grads_;
};

} // namespace tpipe
