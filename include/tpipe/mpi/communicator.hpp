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
// - all_reduce_sum is MPI_Igather to rank 0, the rank-order fold ((x0 + x1) + x2) + ... on rank
//   0, then MPI_Ibcast, in chunks of at most chunk_bytes (4 MiB by default) per member, four
//   chunks in flight (rank 0 buffers 4 * size chunks). The gathers of the first four are posted
//   when the all-reduce starts and move while the loop computes; folding a chunk and posting its
//   broadcast needs the loop (a poll between two actions). Not
//   MPI_Iallreduce / MPI_Ireduce: their algorithms (trees, recursive halving, ring segments)
//   sum in an order that depends on the member count and the message size, so the result
//   differs from the rank-order fold, and for non-power-of-two sizes some algorithms even
//   give different bits on different ranks. This gives the same bits as
//   tpipe::thread_communicator on every member. Cost: rank 0 receives (size-1) times the data.
// - The collectives of one communicator run one after another, in the order they are awaited
//   (the same order on every member, as MPI requires).
// - send/recv: MPI_Isend/MPI_Irecv of bytes, posted when send()/recv() is called (so a receive
//   can be posted early and awaited later); the bytes must stay valid until the awaitable has
//   completed. At most INT_MAX bytes per message. recv checks the received size.
// - split: MPI_Comm_split, blocking, for setup.
// - cancel() (any thread): pending and future operations of this member resume with
//   tpipe::operation_cancelled. Receives and sends are MPI_Cancel'ed (see request_wait). A
//   collective in progress cannot be cancelled in MPI: the member stops waiting and the
//   communicator becomes unusable (reset() then throws); the job is expected to end (MPI_Abort).
//   cancel() is local: it does not tell the other members.
// - One communicator is awaited from one loop at a time (use split or duplicate() per loop).
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/comm/communicator.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/exec/loop.hpp"
#include "tpipe/mpi/error.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/mpi/request.hpp"

namespace tpipe::mpi {

class communicator;

namespace detail {

template <class T>
inline MPI_Datatype datatype() noexcept
{
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
    else return MPI_INT64_T;
}

template <class T>
concept reducible = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int32_t> ||
                    std::is_same_v<T, std::int64_t>;

class collective_op;

struct comm_state {
    MPI_Comm comm = MPI_COMM_NULL;
    int rank = 0, size = 1;
    std::atomic<bool> cancelled{false};
    bool broken = false;  //!< a collective was abandoned by cancel()
    std::size_t chunk_bytes = std::size_t{4} << 20;
    std::vector<std::byte> scratch;  //!< rank 0's gather buffer, reused
    collective_op* head = nullptr;   //!< collectives in await order; the head runs
    collective_op* tail = nullptr;
};

//! One collective as a small state machine of nonblocking MPI phases, polled from the loop.
class collective_op : private poller {
public:
    collective_op(const collective_op&) = delete;
    collective_op& operator=(const collective_op&) = delete;

    bool await_ready()
    {
        if (s_->cancelled.load(std::memory_order_acquire)) {
            error_ = std::make_exception_ptr(operation_cancelled());
            return true;
        }
        if (s_->broken) {
            error_ = std::make_exception_ptr(tpipe::error(
                "tpipe::mpi::communicator: a collective was abandoned by cancel(), so this communicator is unusable; end the job"));
            return true;
        }
        if (s_->size == 1 && trivial_when_alone()) return true;
        return false;
    }

    bool await_suspend(std::coroutine_handle<> h)
    {
        enqueue();
        if (step()) return false;
        return detail::suspend_polled(this, node_, loop_, h, [this] { return step(); });
    }

    void await_resume()
    {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

protected:
    explicit collective_op(comm_state* s) noexcept : s_(s) {}
    ~collective_op() = default;

    //! Tests and posts what it can; sets `finished` once done. Returns an MPI error code.
    //! The default runs phases one after another: test req_, then advance().
    virtual int drive(bool& finished) noexcept
    {
        for (;;) {
            int flag = 0;
            const int rc = MPI_Test(&req_, &flag, MPI_STATUS_IGNORE);  // flag is set for MPI_REQUEST_NULL
            if (rc != MPI_SUCCESS) return rc;
            if (!flag) return MPI_SUCCESS;
            if (done_) {
                finished = true;
                return MPI_SUCCESS;
            }
            if (const int posted = advance(); posted != MPI_SUCCESS) return posted;
        }
    }
    //! Posts the next phase into req_ (returns its MPI error code), or sets done_.
    virtual int advance() noexcept { return MPI_SUCCESS; }
    virtual bool trivial_when_alone() const noexcept { return true; }
    virtual const char* name() const noexcept = 0;

    comm_state* s_;
    MPI_Request req_ = MPI_REQUEST_NULL;
    bool done_ = false;

private:
    void enqueue() noexcept
    {
        detail::begin_outstanding();
        if (s_->tail) s_->tail->next_ = this;
        else s_->head = this;
        s_->tail = this;
    }

    void dequeue() noexcept
    {
        collective_op* prev = nullptr;
        for (collective_op* p = s_->head; p; prev = p, p = p->next_)
            if (p == this) {
                if (prev) prev->next_ = next_;
                else s_->head = next_;
                if (s_->tail == this) s_->tail = prev;
                break;
            }
        detail::end_outstanding();
    }

    bool finish(std::exception_ptr e) noexcept
    {
        error_ = std::move(e);
        dequeue();
        return true;
    }

    //! Makes what progress it can; true once finished.
    bool step() noexcept
    {
        if (s_->cancelled.load(std::memory_order_acquire)) {
            if (started_) s_->broken = true;  // MPI can neither cancel nor free a collective request
            return finish(std::make_exception_ptr(operation_cancelled()));
        }
        if (s_->head != this) return false;
        started_ = true;
        bool finished = false;
        const int rc = drive(finished);
        detail::note_tested();
        if (rc != MPI_SUCCESS) {
            s_->broken = true;
            return finish(error_of(rc));
        }
        return finished ? finish(nullptr) : false;
    }

    std::exception_ptr error_of(int rc) const noexcept
    {
        try {
            return std::make_exception_ptr(mpi_error(error_message(rc, name()), rc));
        } catch (...) {
            return std::current_exception();
        }
    }

    bool poll() noexcept override
    {
        if (!step()) return false;
        loop_->post(&node_);
        return true;
    }

    collective_op* next_ = nullptr;
    bool started_ = false;
    std::exception_ptr error_{};
    wake_node node_{};
    loop* loop_ = nullptr;
};

//! All-reduce in chunks, `window` of them in flight: the gathers of the first window are posted
//! at once (the progress thread moves them while the loop computes); each time the gather of
//! chunk k has completed, rank 0 folds it and every rank posts the broadcast of chunk k and then
//! the gather of chunk k + window. Every rank posts the same sequence g0..g(w-1), b0, gw, b1,
//! g(w+1), ..., as MPI requires of collectives on one communicator.
template <class T>
class [[nodiscard]] all_reduce_op final : public collective_op {
public:
    static constexpr std::size_t window = 4;

    all_reduce_op(comm_state* s, std::span<T> v) noexcept : collective_op(s), v_(v)
    {
        chunk_ = std::max<std::size_t>(1, s->chunk_bytes / sizeof(T));
        chunks_ = (v.size() + chunk_ - 1) / chunk_;
    }

private:
    const char* name() const noexcept override { return "tpipe::mpi::communicator::all_reduce_sum"; }

    std::size_t count_of(std::size_t k) const noexcept { return std::min(chunk_, v_.size() - k * chunk_); }
    T* scratch_of(std::size_t k) noexcept
    {
        return reinterpret_cast<T*>(s_->scratch.data()) + (k % window) * static_cast<std::size_t>(s_->size) * chunk_;
    }

    int post_gather(std::size_t k) noexcept
    {
        const int count = static_cast<int>(count_of(k));
        T* recv = s_->rank == 0 ? scratch_of(k) : nullptr;
        return MPI_Igather(v_.data() + k * chunk_, count, datatype<T>(), recv, count, datatype<T>(), 0, s_->comm, &gathers_[k % window]);
    }

    int drive(bool& finished) noexcept override
    {
        if (!posted_first_) {
            posted_first_ = true;
            if (s_->rank == 0) {
                const std::size_t need = std::min(window, chunks_) * static_cast<std::size_t>(s_->size) * chunk_ * sizeof(T);
                if (s_->scratch.size() < need) {
                    try {
                        s_->scratch.resize(need);
                    } catch (...) {
                        return MPI_ERR_NO_MEM;
                    }
                }
            }
            for (; gathered_ < std::min(window, chunks_); ++gathered_)
                if (const int rc = post_gather(gathered_); rc != MPI_SUCCESS) return rc;
        }
        while (folded_ < chunks_) {
            const std::size_t k = folded_, slot = k % window;
            int flag = 0;
            if (const int rc = MPI_Test(&broadcasts_[slot], &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
            if (const int rc = MPI_Test(&gathers_[slot], &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
            T* out = v_.data() + k * chunk_;
            const std::size_t count = count_of(k);
            if (s_->rank == 0) {  // the rank-order fold, as tpipe::thread_communicator does it
                const T* in = scratch_of(k);
                std::memcpy(out, in, count * sizeof(T));
                for (std::size_t r = 1; r < static_cast<std::size_t>(s_->size); ++r)
                    for (std::size_t e = 0; e < count; ++e) out[e] += in[r * count + e];
            }
            if (const int rc = MPI_Ibcast(out, static_cast<int>(count), datatype<T>(), 0, s_->comm, &broadcasts_[slot]); rc != MPI_SUCCESS)
                return rc;
            ++folded_;
            if (gathered_ < chunks_) {
                if (const int rc = post_gather(gathered_); rc != MPI_SUCCESS) return rc;
                ++gathered_;
            }
        }
        for (auto& b : broadcasts_) {
            int flag = 0;
            if (const int rc = MPI_Test(&b, &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
        }
        finished = true;
        return MPI_SUCCESS;
    }

    std::span<T> v_;
    std::size_t chunk_ = 1, chunks_ = 0;
    std::size_t gathered_ = 0;  //!< gathers posted
    std::size_t folded_ = 0;    //!< chunks folded and broadcast posted
    bool posted_first_ = false;
    MPI_Request gathers_[window] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Request broadcasts_[window] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
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
        check(MPI_Comm_dup(parent, &s_->comm), "MPI_Comm_dup");
        init();
    }
    communicator(communicator&&) noexcept = default;
    communicator& operator=(communicator&& o) noexcept
    {
        if (this != &o) {
            release();
            s_ = std::move(o.s_);
        }
        return *this;
    }
    ~communicator() { release(); }

    int rank() const noexcept { return s_->rank; }
    int size() const noexcept { return s_->size; }
    //! The owned MPI communicator (for calls tpipe does not wrap).
    MPI_Comm native() const noexcept { return s_->comm; }
    //! The flag cancel() sets, for awaiters built on this communicator (e.g. a channel's
    //! tpipe::mpi::request_wait).
    const std::atomic<bool>& cancel_flag() const noexcept { return s_->cancelled; }

    //! In-place sum over all members; rank-order fold, bitwise identical on every member.
    template <class T>
        requires detail::reducible<T>
    detail::all_reduce_op<T> all_reduce_sum(std::span<T> values) noexcept
    {
        return {s_.get(), values};
    }

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
        MPI_Comm c = MPI_COMM_NULL;
        check(MPI_Comm_split(s_->comm, color, key, &c), "MPI_Comm_split");
        return communicator(c, adopt{});
    }

    //! Another handle on the same members (MPI_Comm_dup, blocking collective), e.g. one per loop.
    communicator duplicate() const { return communicator(s_->comm); }

    void cancel() noexcept { s_->cancelled.store(true, std::memory_order_release); }

    //! Clears cancellation for the next iteration (no operation may be pending). Throws if a
    //! collective was abandoned: MPI cannot recover it.
    void reset()
    {
        if (s_->broken)
            throw tpipe::error("tpipe::mpi::communicator::reset: a collective on rank " + std::to_string(rank()) +
                               " was abandoned by cancel() or failed; MPI cannot cancel collectives, so this communicator is "
                               "unusable; end the job (MPI_Abort)");
        s_->cancelled.store(false, std::memory_order_release);
    }

    //! Largest chunk of an all-reduce per member, in bytes (rank 0 buffers size() chunks).
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

    void init()
    {
        check(MPI_Comm_set_errhandler(s_->comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
        check(MPI_Comm_rank(s_->comm, &s_->rank), "MPI_Comm_rank");
        check(MPI_Comm_size(s_->comm, &s_->size), "MPI_Comm_size");
    }

    void release() noexcept
    {
        if (!s_) return;
        if (s_->broken) {
            // MPI may still write the abandoned collective's buffers: keep them (and the
            // communicator) alive until the process ends, reachable (not reported as a leak).
            static auto* abandoned = new std::vector<detail::comm_state*>;
            abandoned->push_back(s_.release());
            return;
        }
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

    std::unique_ptr<detail::comm_state> s_;
};

static_assert(tpipe::communicator<communicator>);

} // namespace tpipe::mpi
