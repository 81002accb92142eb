#pragma once
// tpipe::thread_group / tpipe::thread_communicator: the in-process model of
// tpipe::communicator (tpipe/comm/communicator.hpp). The members are threads of one process,
// each awaiting its own handle from its own loop; for tests and single-machine data parallelism.
//
//   tpipe::thread_group group(4);                 // shared state of 4 members
//   tpipe::thread_communicator c = group.member(2);
//   co_await c.all_reduce_sum(std::span<float>(grad));
//
// How it works
// - Collectives rendezvous per sequence number (the i-th collective of every member meets the
//   i-th of the others). The last member to arrive computes: all_reduce_sum sums into member
//   0's span in the ring order of tpipe/comm/reduction_order.hpp (the order
//   tpipe::mpi::communicator's ring adds in; or, by set_reduction_order, the rank-order fold
//   x0 += x1, then += x2, ...), then copies it to the other members' spans; reduce_scatter_sum
//   writes each member's own segment, all_gather copies each segment to the others, broadcast
//   copies the root's span. Threads share memory, so no ring runs: the order is what matters. It then posts every waiter onto the loop that was
//   current when it suspended, and continues itself without suspending. No allocation per
//   operation in the steady state (rendezvous slots and message buffers are reused).
// - Members that call different collectives, or with different sizes or roots, at the same
//   sequence number all get a tpipe::error naming both calls.
// - Point-to-point is eager: send copies the bytes into the receiver's mailbox (or straight
//   into a receive already waiting for them) and completes at once; receives match by
//   (source, tag) in FIFO order.
// - Awaited on a thread that drives no tpipe::loop, an operation blocks that thread instead.
// - reset(stop) starts the member's next iteration: it drops the member's undelivered messages
//   and clears its cancellation, except a group cancellation made in the iteration it starts (a
//   replica that failed before this one began it). Once `stop` is stopped, the member cancels
//   its whole group (cancel_group): no transport tells the replicas of one process about each
//   other's failures. cancel() cancels one member, thread_group::cancel() every member.
// - One mutex per group guards the bookkeeping; the reduction and copies run outside it.
#include <coroutine>
#include <exception>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <utility>

#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/comm/detail/thread_group_state.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/on_stop.hpp"

namespace tpipe {

class thread_communicator;
class thread_group;

//! One member's handle on a thread_group (see the file comment). Cheap to move; the group's
//! state lives as long as any handle.
class thread_communicator {
public:
    //! Awaiter of a collective.
    class [[nodiscard]] collective_awaiter {
    public:
        bool await_ready() const noexcept { return false; }
        bool await_suspend(std::coroutine_handle<> h)
        {
            op_.node.handle = h;
            return g_->arrive(rank_, op_);
        }
        void await_resume() const
        {
            if (op_.error) std::rethrow_exception(op_.error);
        }

    private:
        friend class thread_communicator;
        collective_awaiter(detail::tc::group_state* g, int rank, detail::tc::collective_op op) : g_(g), rank_(rank), op_(op) {}
        detail::tc::group_state* g_;
        int rank_;
        detail::tc::collective_op op_;
    };

    //! Awaiter of a receive.
    class [[nodiscard]] recv_awaiter {
    public:
        bool await_ready() const noexcept { return false; }
        bool await_suspend(std::coroutine_handle<> h)
        {
            op_.node.handle = h;
            return g_->receive(rank_, op_);
        }
        void await_resume() const
        {
            if (op_.error) std::rethrow_exception(op_.error);
        }

    private:
        friend class thread_communicator;
        recv_awaiter(detail::tc::group_state* g, int rank, int peer, int tag, std::span<std::byte> bytes) : g_(g), rank_(rank)
        {
            op_.source = peer;
            op_.tag = tag;
            op_.bytes = bytes;
        }
        detail::tc::group_state* g_;
        int rank_;
        detail::tc::recv_op op_;
    };

    //! Awaiter of an operation that has already completed (send is eager).
    class [[nodiscard]] ready_awaiter {
    public:
        bool await_ready() const noexcept { return true; }
        void await_suspend(std::coroutine_handle<>) const noexcept {}
        void await_resume() const
        {
            if (error_) std::rethrow_exception(error_);
        }

    private:
        friend class thread_communicator;
        explicit ready_awaiter(std::exception_ptr e) : error_(std::move(e)) {}
        std::exception_ptr error_;
    };

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return g_->size(); }

    //! In-place sum over all members, in the ring order (or the rank order, see
    //! set_reduction_order); bitwise identical on every member.
    template <reducible T>
    collective_awaiter all_reduce_sum(std::span<T> values)
    {
        return elementwise(detail::tc::kind::all_reduce, values);
    }

    //! In place: this member's ring segment (tpipe::ring_segment) becomes the ring-order sum;
    //! the other segments are left as they were (tpipe/comm/reduce_scatter_communicator.hpp).
    template <reducible T>
    collective_awaiter reduce_scatter_sum(std::span<T> values)
    {
        return elementwise(detail::tc::kind::reduce_scatter, values);
    }

    //! In place: every member's segment s becomes a copy of member s's segment s.
    template <reducible T>
    collective_awaiter all_gather(std::span<T> values)
    {
        return elementwise(detail::tc::kind::all_gather, values);
    }

    //! The order of this member's all_reduce_sum from now on (ring by default; native is refused:
    //! threads have no implementation of their own). Every member must use the same order: a
    //! collective whose members differ is refused like a size mismatch.
    void set_reduction_order(reduction_order o)
    {
        if (o == reduction_order::native)
            throw invalid_argument("thread_communicator::set_reduction_order(native): threads have no native all-reduce; use ring or rank_order");
        order_ = o;
    }
    reduction_order order() const noexcept { return order_; }

    //! Copies root's bytes into every member's span (same size everywhere).
    collective_awaiter broadcast(std::span<std::byte> bytes, int root)
    {
        check_member(root, "broadcast root");
        detail::tc::collective_op op;
        op.what = detail::tc::kind::broadcast;
        op.data = bytes.data();
        op.count = bytes.size();
        op.root = root;
        return {g_.get(), rank_, op};
    }

    //! Completes once every member has arrived.
    collective_awaiter barrier() { return {g_.get(), rank_, detail::tc::collective_op{}}; }

    //! Eager: copies the bytes for `peer` and completes at once.
    ready_awaiter send(int peer, int tag, std::span<const std::byte> bytes)
    {
        check_member(peer, "send peer");
        check_tag(tag);
        return ready_awaiter{g_->send(rank_, peer, tag, bytes)};
    }

    //! Completes once the next message from `peer` with `tag` has been copied into `bytes`
    //! (it must have exactly that size).
    recv_awaiter recv(int peer, int tag, std::span<std::byte> bytes)
    {
        check_member(peer, "recv peer");
        check_tag(tag);
        return {g_.get(), rank_, peer, tag, bytes};
    }

    //! Blocking collective for setup: every member calls it (from its own thread); the
    //! members with the same color (>= 0) form a new group, ranked by (key, old rank).
    thread_communicator split(int color, int key)
    {
        auto [g, r] = g_->split(rank_, color, key);
        thread_communicator c(std::move(g), r);
        c.order_ = order_;
        return c;
    }

    //! Cancels this member only (any thread).
    void cancel() noexcept { g_->cancel(rank_); }
    //! Cancels every member of the group (any thread) for this member's iteration: what a
    //! stopped iteration does. A member that has not yet reset for that iteration stays
    //! cancelled through its reset (members reset once per iteration, as the runner does).
    void cancel_group() noexcept { g_->cancel_all(rank_); }
    //! Starts this member's next iteration (see the file comment); its group is cancelled once
    //! `stop` is stopped.
    void reset(std::stop_token stop = {})
    {
        on_stop_.unwatch();
        g_->reset(rank_);
        on_stop_.watch(std::move(stop), group_canceller{g_, rank_});
    }

private:
    friend class thread_group;
    thread_communicator(std::shared_ptr<detail::tc::group_state> g, int rank) : g_(std::move(g)), rank_(rank) {}

    void check_member(int r, const char* what) const
    {
        if (r < 0 || r >= size())
            throw invalid_argument(std::string("thread_communicator: ") + what + " " + std::to_string(r) +
                                   " is not a member; members are 0.." + std::to_string(size() - 1));
    }
    static void check_tag(int tag)
    {
        if (tag < 0) throw invalid_argument("thread_communicator: tag " + std::to_string(tag) + " is negative; tags are >= 0");
    }

    template <class T>
    collective_awaiter elementwise(detail::tc::kind what, std::span<T> values)
    {
        detail::tc::collective_op op;
        op.what = what;
        op.type = detail::tc::elem_of<T>;
        op.data = reinterpret_cast<std::byte*>(values.data());
        op.count = values.size();
        if (what == detail::tc::kind::all_reduce) op.order = order_;
        return {g_.get(), rank_, op};
    }

    struct group_canceller {  // holds the group: a handle's members move and die in any order
        std::shared_ptr<detail::tc::group_state> g;
        int rank;
        void operator()() const noexcept { g->cancel_all(rank); }
    };

    std::shared_ptr<detail::tc::group_state> g_;
    int rank_;
    reduction_order order_ = reduction_order::ring;
    on_stop<group_canceller> on_stop_;
};

//! The shared state of n in-process members; hands out one handle per member.
class thread_group {
public:
    explicit thread_group(int n) : g_(make(n)) {}
    int size() const noexcept { return g_->size(); }
    //! The handle of member i (0 <= i < size()); take one per member.
    thread_communicator member(int i) const
    {
        if (i < 0 || i >= size())
            throw invalid_argument("thread_group::member(" + std::to_string(i) + "): members are 0.." + std::to_string(size() - 1));
        return thread_communicator(g_, i);
    }
    //! Cancels every member (what a runner does when one replica fails).
    void cancel() noexcept { g_->cancel_all(); }

private:
    static std::shared_ptr<detail::tc::group_state> make(int n)
    {
        if (n < 1) throw invalid_argument("thread_group(" + std::to_string(n) + "): a group has at least 1 member");
        return std::make_shared<detail::tc::group_state>(n);
    }
    std::shared_ptr<detail::tc::group_state> g_;
};

static_assert(communicator<thread_communicator>);
static_assert(reduce_scatter_communicator<thread_communicator>);

} // namespace tpipe
