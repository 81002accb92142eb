#pragma once
// The communicator concept: a group of members (ranks) that exchange bytes point-to-point and
// run collectives (sum all-reduce, broadcast, barrier), split into sub-groups. Data parallelism
// all-reduces each stage's gradients across its replicas through it. Models:
// tpipe::thread_communicator (members are threads of one process, tpipe/comm/thread_communicator.hpp),
// tpipe::mpi::communicator (members are MPI processes, tpipe/mpi/communicator.hpp) and
// tpipe::nccl::communicator (members are GPUs, spans are device memory, tpipe/nccl/communicator.hpp).
//
// Semantics (every model)
// - Every operation but split() returns an awaitable meant to be awaited from a coroutine that
//   runs on a tpipe::loop (a loop_thread, sync_wait). It never blocks the loop's thread: it
//   suspends, and a tpipe::poller of that loop or a peer resumes the coroutine on the loop it
//   suspended on.
// - Collectives (all_reduce_sum, broadcast, barrier) are called by every member, in the same
//   order on every member, with the same sizes (and the same root); a model refuses mismatched
//   sizes with tpipe::error where it can see them.
// - A result is bitwise identical on every member: the replicas of a data-parallel group must
//   stay bitwise identical. The order of all_reduce_sum's additions is the model's:
//   thread_communicator and mpi::communicator add in the ring order that
//   tpipe/comm/reduction_order.hpp defines once (segment s of the buffer is the left fold of
//   members s+1, s+2, ..., s, in T), the order of a bandwidth-optimal ring reduce-scatter +
//   all-gather, so the same program on threads and on processes gives the same bits. Both
//   offer the rank-order fold ((x0 + x1) + x2) + ... as reduction_order::rank_order, and MPI
//   its own MPI_Iallreduce as reduction_order::native (MPI's bits). nccl::communicator uses
//   NCCL's ring/tree order, the same on every member but neither of tpipe's. Every order equals
//   the rank-order fold for two members (a + b == b + a) and for integers.
// - Optional: reduce_scatter_sum and all_gather (tpipe::reduce_scatter_communicator,
//   tpipe/comm/reduce_scatter_communicator.hpp), what a sharded optimizer needs.
// - send(peer, tag, bytes) / recv(peer, tag, bytes): messages from one source with one tag are
//   received in the order they were sent; recv's span has exactly the size of the message (a
//   different size is a tpipe::error). Tags are >= 0. send's awaitable completes when the
//   bytes may be reused: keep them alive until then (the thread model copies them at once; MPI
//   posts the send when send() is called and may read them until completion). A model may
//   start an operation when it is called (MPI posts p2p at the call) or when it is awaited.
// - split(color, key) is a *blocking* collective meant for setup, called by every member: the
//   members with the same color (>= 0) form a new communicator, ranked by (key, old rank).
// - reset(stop) starts this member's next iteration; call it only when no operation of this
//   member is pending. Once `stop` is stopped (any thread: tpipe::run stops its iteration's
//   token when the iteration fails), every pending and future operation of this member
//   completes by throwing tpipe::operation_cancelled, so a member whose peer failed never waits
//   forever. Members that no transport tells of each other's failures (threads of one process)
//   cancel their whole group. A default std::stop_token never stops. A model may also offer a
//   direct cancel() of its own.
// - One member handle is used from one loop at a time; give each loop its own handle (split).
#include <cstddef>
#include <cstdint>
#include <span>
#include <stop_token>
#include <type_traits>

#include "tpipe/async/awaitable.hpp"

namespace tpipe {

//! The element types a communicator reduces (all_reduce_sum, reduce_scatter_sum) and gathers:
//! the one list every model (threads, MPI, NCCL) maps to its own type tags.
template <class T>
concept reducible = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::int64_t>;

//! A model of the communicator contract above (all_reduce_sum is also required for
//! std::int32_t and std::int64_t; the concept checks float and double).
template <class C>
concept communicator =
    std::move_constructible<C> &&
    requires(C& c, const C& cc, int i, std::span<float> f, std::span<double> d, std::span<std::byte> b,
             std::span<const std::byte> cb) {
        { cc.rank() } -> std::same_as<int>;
        { cc.size() } -> std::same_as<int>;
        { c.all_reduce_sum(f) } -> awaitable_of<void>;
        { c.all_reduce_sum(d) } -> awaitable_of<void>;
        { c.broadcast(b, i) } -> awaitable_of<void>;
        { c.barrier() } -> awaitable_of<void>;
        { c.send(i, i, cb) } -> awaitable_of<void>;
        { c.recv(i, i, b) } -> awaitable_of<void>;
        { c.split(i, i) } -> std::same_as<C>;
        c.reset(std::stop_token{});
    };

} // namespace tpipe
