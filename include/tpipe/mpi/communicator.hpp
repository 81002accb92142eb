#pragma once
// tpipe::mpi::communicator: the MPI model of tpipe::communicator (tpipe/comm/communicator.hpp).
// Members are the processes of an MPI communicator that this object duplicates and owns.
//
//   tpipe::mpi::environment env(argc, argv);               // MPI_THREAD_MULTIPLE
//   auto world = tpipe::mpi::communicator::world();        // a duplicate of MPI_COMM_WORLD
//   auto replicas = world.split(stage, replica);           // setup: blocking
//   co_await replicas.all_reduce_sum(std::span<float>(grad));
//
// How it works
// - Every operation posts nonblocking MPI calls and awaits them as pollers of the current loop
//   (tpipe::mpi::request_wait); the progress thread moves the data while the loop computes.
// - all_reduce_sum, by set_reduction_order (every member must choose the same):
//   - reduction_order::ring (default): a ring reduce-scatter + all-gather over point-to-point
//     messages, chunked (chunk_bytes per piece, 1 MiB by default) and pipelined
//     (tpipe/mpi/ring_all_reduce.hpp). It adds in the order tpipe/comm/reduction_order.hpp
//     defines, so it gives the bits tpipe::thread_communicator gives, on every member. Each
//     member sends and receives 2 n (size - 1) / size of the n bytes (traffic() counts them).
//   - reduction_order::rank_order: MPI_Igather to rank 0, the rank-order fold, MPI_Ibcast
//     (tpipe/mpi/rank_order_all_reduce.hpp); the same bits as threads in that order. Rank 0
//     receives (size - 1) times the data.
//   - reduction_order::native: MPI_Iallreduce in place. Its bits are MPI's: its algorithms
//     (trees, recursive halving, ring segments) pick an order by member count and message size,
//     which matches neither of the above, and for non-power-of-two sizes some give different
//     bits on different ranks. For speed comparisons, or where bits do not matter.
// - reduce_scatter_sum / all_gather (tpipe::reduce_scatter_communicator): the ring's two halves.
// - The collectives of one communicator run one after another, in the order they are awaited
//   (the same order on every member, as MPI requires).
// - send/recv: MPI_Isend/MPI_Irecv of bytes, posted when send()/recv() is called (so a receive
//   can be posted early and awaited later); the bytes must stay valid until the awaitable has
//   completed. At most INT_MAX bytes per message. recv checks the received size.
// - split: MPI_Comm_split, blocking, for setup. Construction, duplicate() and split() are
//   bounded by environment_options::watchdog (tpipe/mpi/setup_watch.hpp).
// - Once reset's stop token is stopped, or after cancel() (any thread): pending and future
//   operations of this member resume with tpipe::operation_cancelled. Receives and sends are
//   MPI_Cancel'ed (see request_wait). A collective in progress cannot be cancelled in MPI: the
//   member stops waiting and the communicator becomes unusable (reset() then throws); the job is
//   expected to end (MPI_Abort). Cancellation is local: it does not tell the other members.
// - set_watchdog(bound): a collective that makes no progress for `bound` (a member stopped or
//   hung) fails with tpipe::watchdog_error naming the silent members and what the others wait in
//   (tpipe/mpi/stall_watch.hpp); the communicator is then unusable and tpipe::mpi::environment
//   ends the job with MPI_Abort. Progress: the ring's pieces moving; the rank-order fold and
//   native collectives count from their start, so the bound must exceed the longest of them.
//   Communicators split or duplicated from this one inherit it.
//   A member that works elsewhere for longer on purpose, while the others wait, says so with
//   busy(what) (tpipe/mpi/busy_section.hpp).
// - One communicator is awaited from one loop at a time (use split or duplicate() per loop).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/reduce_scatter_communicator.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/async/on_stop.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/mpi/busy_section.hpp"
#include "tpipe/mpi/collective_op.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/mpi/rank_order_all_reduce.hpp"
#include "tpipe/mpi/request.hpp"
#include "tpipe/mpi/ring_all_reduce.hpp"
#include "tpipe/mpi/setup_watch.hpp"
#include "tpipe/mpi/stall_watch.hpp"

namespace tpipe::mpi {

class communicator;

namespace detail {

//! MPI_Iallreduce in place, in pieces of at most INT_MAX elements (reduction_order::native).
template <class T>
class native_all_reduce {
public:
    native_all_reduce(comm_state* s, std::span<T> v) noexcept : s_(s), v_(v) {}
    int drive(bool& finished) noexcept
    {
        for (;;) {
            int flag = 0;
            if (const int rc = MPI_Test(&req_, &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
            if (offset_ >= v_.size()) {
                finished = true;
                return MPI_SUCCESS;
            }
            const std::size_t count = std::min<std::size_t>(v_.size() - offset_, INT_MAX);
            const std::size_t at = std::exchange(offset_, offset_ + count);
            if (const int rc = MPI_Iallreduce(MPI_IN_PLACE, v_.data() + at, static_cast<int>(count), datatype<T>(), MPI_SUM, s_->comm, &req_);
                rc != MPI_SUCCESS)
                return rc;
        }
    }

private:
    comm_state* s_;
    std::span<T> v_;
    std::size_t offset_ = 0;
    MPI_Request req_ = MPI_REQUEST_NULL;
};

//! all_reduce_sum in the communicator's reduction order (one of three algorithms).
template <class T>
class [[nodiscard]] all_reduce_op final : public collective_op {
public:
    all_reduce_op(comm_state* s, std::span<T> v) noexcept : collective_op(s), algo_(make(s, v)) {}

private:
    using algorithm = std::variant<ring_all_reduce<T>, rank_order_all_reduce<T>, native_all_reduce<T>>;
    static algorithm make(comm_state* s, std::span<T> v) noexcept
    {
        switch (s->order) {
        case reduction_order::rank_order: return algorithm(std::in_place_index<1>, s, v);
        case reduction_order::native: return algorithm(std::in_place_index<2>, s, v);
        default: return algorithm(std::in_place_index<0>, s, v, ring_all_reduce<T>::both);
        }
    }
    const char* name() const noexcept override { return "tpipe::mpi::communicator::all_reduce_sum"; }
    int drive(bool& finished) noexcept override
    {
        return std::visit([&](auto& a) noexcept { return a.drive(finished); }, algo_);
    }
    algorithm algo_;
};

//! reduce_scatter_sum or all_gather: one half of the ring.
template <class T>
class [[nodiscard]] ring_half_op final : public collective_op {
public:
    ring_half_op(comm_state* s, std::span<T> v, unsigned phase) noexcept : collective_op(s), ring_(s, v, phase), phase_(phase) {}

private:
    const char* name() const noexcept override
    {
        return phase_ == ring_all_reduce<T>::reduce_scatter ? "tpipe::mpi::communicator::reduce_scatter_sum"
                                                           : "tpipe::mpi::communicator::all_gather";
    }
    int drive(bool& finished) noexcept override { return ring_.drive(finished); }
    ring_all_reduce<T> ring_;
    unsigned phase_;
};

class [[nodiscard]] broadcast_op final : public collective_op {
public:
    broadcast_op(comm_state* s, std::span<std::byte> b, int root) noexcept : collective_op(s), b_(b), root_(root) {}

private:
    const char* name() const noexcept override { return "tpipe::mpi::communicator::broadcast"; }
    int advance() noexcept override
    {
        if (offset_ >= b_.size()) {
            done_ = true;
            return MPI_SUCCESS;
        }
        const std::size_t count = std::min<std::size_t>(b_.size() - offset_, std::size_t{1} << 30);
        const std::size_t at = offset_;
        offset_ += count;
        return MPI_Ibcast(b_.data() + at, static_cast<int>(count), MPI_BYTE, root_, s_->comm, &req_);
    }
    std::span<std::byte> b_;
    int root_;
    std::size_t offset_ = 0;
};

class [[nodiscard]] barrier_op final : public collective_op {
public:
    explicit barrier_op(comm_state* s) noexcept : collective_op(s) {}

private:
    const char* name() const noexcept override { return "tpipe::mpi::communicator::barrier"; }
    int advance() noexcept override
    {
        if (posted_) {
            done_ = true;
            return MPI_SUCCESS;
        }
        posted_ = true;
        return MPI_Ibarrier(s_->comm, &req_);
    }
    bool posted_ = false;
};

//! A receive: request_wait plus the check that the message had the expected size.
class [[nodiscard]] recv_op {
public:
    recv_op(request_wait w, std::size_t expected, int rank, int peer, int tag) noexcept
        : w_(std::move(w)), expected_(expected), rank_(rank), peer_(peer), tag_(tag)
    {
    }
    bool await_ready() { return w_.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return w_.await_suspend(h); }
    void await_resume()
    {
        w_.await_resume();
        if (w_.received_bytes() != expected_)
            throw tpipe::error("tpipe::mpi::communicator: rank " + std::to_string(rank_) + " receives " + std::to_string(expected_) +
                               " bytes from rank " + std::to_string(peer_) + " with tag " + std::to_string(tag_) + ", but the message has " +
                               std::to_string(w_.received_bytes()) + " bytes; both sides must agree on the size");
    }

private:
    request_wait w_;
    std::size_t expected_;
    int rank_, peer_, tag_;
};

} // namespace detail

class communicator {
public:
    //! A duplicate of MPI_COMM_WORLD (collective over the world).
    static communicator world() { return communicator(MPI_COMM_WORLD); }

    //! Duplicates `parent` (a collective over it); the caller keeps ownership of `parent`.
    explicit communicator(MPI_Comm parent) : s_(std::make_unique<detail::comm_state>())
    {
        s_->comm = detail::setup_dup(parent, "tpipe::mpi::communicator (MPI_Comm_dup)");
        init();
    }
    communicator(communicator&&) noexcept = default;
    communicator& operator=(communicator&& o) noexcept
    {
        if (this != &o) {
            release();
            s_ = std::move(o.s_);
            on_stop_ = std::move(o.on_stop_);
        }
        return *this;
    }
    ~communicator() { release(); }

    int rank() const noexcept { return s_->rank; }
    int size() const noexcept { return s_->size; }
    //! The owned MPI communicator (for calls tpipe does not wrap).
    MPI_Comm native() const noexcept { return s_->comm; }
    //! The flag cancellation sets, for awaiters built on this communicator (e.g. a channel's
    //! tpipe::mpi::request_wait).
    const std::atomic<bool>& cancel_flag() const noexcept { return s_->cancelled; }

    //! In-place sum over all members, in the reduction order (ring by default); bitwise
    //! identical on every member (native: as MPI guarantees).
    template <class T>
        requires detail::reducible<T>
    detail::all_reduce_op<T> all_reduce_sum(std::span<T> values) noexcept
    {
        return {s_.get(), values};
    }

    //! In place: this member's ring segment (tpipe::ring_segment) becomes the ring-order sum;
    //! the other segments hold partial sums (tpipe/comm/reduce_scatter_communicator.hpp).
    template <class T>
        requires detail::reducible<T>
    detail::ring_half_op<T> reduce_scatter_sum(std::span<T> values) noexcept
    {
        return {s_.get(), values, detail::ring_all_reduce<T>::reduce_scatter};
    }

    //! In place: every member's segment s becomes a copy of member s's segment s.
    template <class T>
        requires detail::reducible<T>
    detail::ring_half_op<T> all_gather(std::span<T> values) noexcept
    {
        return {s_.get(), values, detail::ring_all_reduce<T>::all_gather};
    }

    //! The algorithm and order of all_reduce_sum from now on (see the file comment); every
    //! member must choose the same (MPI cannot check it: a mismatch hangs or gives wrong sums).
    void set_reduction_order(reduction_order o) noexcept { s_->order = o; }
    reduction_order order() const noexcept { return s_->order; }

    //! Payload bytes this member's ring collectives have sent and received so far.
    collective_traffic traffic() const noexcept { return s_->traffic; }

    //! Copies root's bytes into every member's span (same size everywhere).
    detail::broadcast_op broadcast(std::span<std::byte> bytes, int root)
    {
        check_member(root, "broadcast root");
        return {s_.get(), bytes, root};
    }

    detail::barrier_op barrier() noexcept { return detail::barrier_op(s_.get()); }

    //! Posts MPI_Isend now; the awaitable completes when the bytes may be reused.
    request_wait send(int peer, int tag, std::span<const std::byte> bytes)
    {
        check_p2p(peer, tag, bytes.size(), "send");
        MPI_Request r = MPI_REQUEST_NULL;
        if (!s_->cancelled.load(std::memory_order_acquire))
            check(MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, tag, s_->comm, &r), "MPI_Isend");
        return request_wait(r, &s_->cancelled, nullptr, request_kind::point_to_point, "tpipe::mpi::communicator::send");
    }

    //! Posts MPI_Irecv now; the awaitable completes once exactly bytes.size() bytes arrived.
    detail::recv_op recv(int peer, int tag, std::span<std::byte> bytes)
    {
        check_p2p(peer, tag, bytes.size(), "recv");
        MPI_Request r = MPI_REQUEST_NULL;
        if (!s_->cancelled.load(std::memory_order_acquire))
            check(MPI_Irecv(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, peer, tag, s_->comm, &r), "MPI_Irecv");
        return {request_wait(r, &s_->cancelled, nullptr, request_kind::point_to_point, "tpipe::mpi::communicator::recv"), bytes.size(),
                s_->rank, peer, tag};
    }

    //! Blocking collective for setup (MPI_Comm_split): members with the same color (>= 0) form a
    //! new communicator, ranked by (key, old rank).
    communicator split(int color, int key) const
    {
        if (color < 0)
            throw invalid_argument("tpipe::mpi::communicator::split: color " + std::to_string(color) + " on rank " +
                                   std::to_string(rank()) + " is negative; colors must be >= 0 (and every rank calls split)");
        // MPI_Comm_split has no nonblocking form: bounded, it runs beside a poll of the bound.
        const MPI_Comm c = detail::setup_make("tpipe::mpi::communicator::split",
                                              [parent = s_->comm, color, key](MPI_Comm* out) { return MPI_Comm_split(parent, color, key, out); });
        communicator out(c, adopt{});
        out.s_->order = s_->order;
        out.s_->chunk_bytes = s_->chunk_bytes;
        out.inherit(*s_);
        return out;
    }

    //! Another handle on the same members (MPI_Comm_dup, blocking collective), e.g. one per loop.
    communicator duplicate() const
    {
        communicator out(s_->comm);
        out.inherit(*s_);
        return out;
    }

    //! Bounds every collective of this communicator (and of those split or duplicated from it
    //! later): one that makes no progress for `bound` fails with tpipe::watchdog_error, also
    //! written to stderr, naming the members that are silent (by `name_of(process)`, process being
    //! the rank in MPI_COMM_WORLD; default "process N") and what the others wait in. 0: none.
    //! Collective (MPI_Comm_dup): every member calls it, with the same bound.
    void set_watchdog(std::chrono::milliseconds bound, detail::process_namer name_of = {})
    {
        if (bound.count() < 0)
            throw invalid_argument("tpipe::mpi::communicator::set_watchdog: the bound " + std::to_string(bound.count()) +
                                   " ms is negative; give a positive bound, or 0 for none");
        s_->watch.reset();
        auto& largest = detail::largest_watchdog_ms();
        for (auto m = largest.load(); bound.count() > m && !largest.compare_exchange_weak(m, bound.count());) {}
        if (bound.count() > 0)
            s_->watch = std::make_unique<detail::stall_watch>(
                detail::setup_dup(s_->comm, "tpipe::mpi::communicator::set_watchdog (MPI_Comm_dup)"), bound, std::move(name_of));
    }
    //! The watchdog's bound (0: none).
    std::chrono::milliseconds watchdog() const noexcept { return s_->watch ? s_->watch->bound() : std::chrono::milliseconds(0); }

    //! While the result lives, this member works outside the communicator's collectives on
    //! purpose (`what`, e.g. "profiling the TeraPipe plan"), perhaps for longer than the
    //! watchdog's bound: the others' watchdog waits on while it answers, and names `what` if it
    //! stops (tpipe/mpi/busy_section.hpp). No collective of this communicator on this member, and
    //! no set_watchdog, meanwhile. Without a watchdog it does nothing.
    busy_section busy(std::string what) { return busy_section(s_->watch.get(), std::move(what)); }

    //! Cancels this member (any thread).
    void cancel() noexcept { canceller{s_.get()}(); }

    //! Clears cancellation for the next iteration (no operation may be pending), which is
    //! cancelled once `stop` is stopped. Throws if a collective was abandoned: MPI cannot
    //! recover it.
    void reset(std::stop_token stop = {})
    {
        on_stop_.unwatch();
        if (s_->broken)
            throw tpipe::error("tpipe::mpi::communicator::reset: a collective on rank " + std::to_string(rank()) +
                               " was abandoned by a cancellation or failed; MPI cannot cancel collectives, so this communicator is "
                               "unusable; end the job (MPI_Abort)");
        s_->cancelled.store(false, std::memory_order_release);
        on_stop_.watch(std::move(stop), canceller{s_.get()});
    }

    //! Largest piece of a collective's message, in bytes (the ring keeps 4 in flight; the
    //! rank-order fold buffers 4 * size() on rank 0).
    void set_chunk_bytes(std::size_t bytes)
    {
        if (bytes == 0 || bytes > std::size_t{INT_MAX})
            throw invalid_argument("tpipe::mpi::communicator::set_chunk_bytes(" + std::to_string(bytes) + "): needs 1..INT_MAX bytes");
        s_->chunk_bytes = bytes;
    }

private:
    struct adopt {};
    communicator(MPI_Comm owned, adopt) : s_(std::make_unique<detail::comm_state>())
    {
        s_->comm = owned;
        init();
    }

    //! The watchdog of the communicator this one was split or duplicated from.
    void inherit(const detail::comm_state& from)
    {
        if (from.watch) set_watchdog(from.watch->bound(), from.watch->namer());
    }

    void init()
    {
        check(MPI_Comm_set_errhandler(s_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        s_->ring_comm = detail::setup_dup(s_->comm, "tpipe::mpi::communicator (MPI_Comm_dup)");
        check(MPI_Comm_rank(s_->comm, &s_->rank), "MPI_Comm_rank");
        check(MPI_Comm_size(s_->comm, &s_->size), "MPI_Comm_size");
    }

    void release() noexcept
    {
        on_stop_.unwatch();
        if (!s_) return;
        if (s_->broken) {
            // MPI may still write the abandoned collective's buffers: keep them (and the
            // communicator) alive until the process ends, reachable (not reported as a leak).
            static auto* abandoned = new std::vector<detail::comm_state*>;
            abandoned->push_back(s_.release());
            return;
        }
        if (s_->ring_comm != MPI_COMM_NULL) MPI_Comm_free(&s_->ring_comm);
        if (s_->comm != MPI_COMM_NULL) MPI_Comm_free(&s_->comm);
        s_.reset();
    }

    void check_member(int r, const char* what) const
    {
        if (r < 0 || r >= size())
            throw invalid_argument(std::string("tpipe::mpi::communicator: ") + what + " " + std::to_string(r) + " is not a member; members are 0.." +
                                   std::to_string(size() - 1));
    }

    void check_p2p(int peer, int tag, std::size_t bytes, const char* what) const
    {
        check_member(peer, what);
        if (tag < 0) throw invalid_argument("tpipe::mpi::communicator: tag " + std::to_string(tag) + " is negative; tags are >= 0");
        if (bytes > std::size_t{INT_MAX})
            throw invalid_argument("tpipe::mpi::communicator: a message of " + std::to_string(bytes) + " bytes is too large; at most " +
                                   std::to_string(INT_MAX) + " bytes per message (split it)");
    }

    struct canceller {
        detail::comm_state* s;
        void operator()() const noexcept { s->cancelled.store(true, std::memory_order_release); }
    };

    std::unique_ptr<detail::comm_state> s_;
    on_stop<canceller> on_stop_;
};

static_assert(tpipe::communicator<communicator>);
static_assert(tpipe::reduce_scatter_communicator<communicator>);

} // namespace tpipe::mpi
