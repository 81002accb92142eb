#pragma once
// tpipe::nccl::basic_communicator<Api>: the NCCL model of tpipe::communicator
// (tpipe/comm/communicator.hpp) over an api (tpipe/nccl/api.hpp); tpipe::nccl::communicator
// (tpipe/nccl/communicator.hpp) is it over the real NCCL. Members are NCCL ranks, one GPU each.
//
//   auto id = tpipe::nccl::file_bootstrap(path, rank).exchange([&] { return make_id(); });
//   auto world = tpipe::nccl::communicator::init({}, size, id, rank);   // on this thread's GPU
//   co_await world.all_reduce_sum(std::span<float>(grad_on_device, n));
//
// Spans are DEVICE memory (of the communicator's GPU): NCCL reads and writes them on the GPU.
//
// How it works
// - Every operation is issued when it is called, on the communicator's stream (ncclAllReduce,
//   ncclBroadcast, ncclSend/ncclRecv, each its own launch), and returns an awaitable that
//   completes when that work has completed on the GPU: api.after(stream, what, check), which
//   polls a CUDA event from the current tpipe::loop; check() polls ncclCommGetAsyncError and
//   the watchdog (options::timeout). On an asynchronous error or a timeout the communicator is
//   aborted (ncclCommAbort) and the awaitable throws tpipe::nccl::nccl_error naming the rank,
//   the operation and NCCL's reason (ncclGetLastError); the communicator is unusable after.
// - all_reduce_sum is ncclAllReduce(ncclSum) in place: NOT the rank-order fold. NCCL's ring and
//   tree algorithms add in an order of their own, the same on every member, so every member
//   gets the same bits (what data parallelism needs); for two members it equals the rank-order
//   fold (a + b == b + a), for more it may differ from it in the last bits. float, double, int32,
//   int64.
// - barrier is an all-reduce of one int32 (NCCL has no barrier).
// - send/recv: NCCL has no tags and no sizes on the wire: point-to-point messages between two
//   members match in the order they were posted, whatever their tags, and a receive must have
//   exactly the sender's size (NCCL cannot check it: a mismatch hangs or corrupts; the fake
//   api reports it). Each is its own launch on the stream, so a send waits on the GPU until
//   the peer's receive is posted: two members that send to each other first deadlock (post the
//   receive on one side first, or use tpipe::nccl::basic_transport, which groups them).
// - split(color, key): ncclCommSplit, blocking, for setup; the new communicator has its own
//   stream on the same GPU.
// - Once reset's stop token is stopped, or after cancel() (any thread): pending and future
//   operations throw tpipe::operation_cancelled. With NCCL work in flight, the communicator is
//   aborted (ncclCommAbort: the only way to stop a kernel that waits for a dead peer) — by the
//   cancelling thread itself when the owning thread is inside an NCCL call (NCCL allows abort
//   from another thread for exactly that), else by the owning loop's next poll. reset() then
//   throws: an aborted NCCL communicator cannot be reused; bootstrap a new one. A cancel with
//   nothing in flight aborts nothing, and reset() clears it.
// - One communicator is used from one loop at a time (NCCL calls on one communicator must not
//   run concurrently).
#include <atomic>
#include <coroutine>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <utility>

#include "tpipe/comm/averaging_communicator.hpp"
#include "tpipe/comm/communicator.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/async/on_stop.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/bounded_setup.hpp"
#include "tpipe/nccl/nccl_error.hpp"

namespace tpipe::nccl {

struct communicator_options {
    //! An operation still running after this long aborts the communicator and throws (a peer
    //! that died or never posts its side).
    std::chrono::nanoseconds timeout = std::chrono::minutes(10);
};

namespace detail {

//! The state one member handle shares with its awaitables and with cancel() on other threads.
template <class Api>
struct comm_state {
    enum : unsigned { in_call = 1, cancelled = 2, aborted = 4 };

    Api api;
    typename Api::comm_t comm{};
    typename Api::stream_t stream{};
    bool owns_stream = false;
    int rank = 0, size = 1;
    communicator_options opts{};
    std::atomic<unsigned> flags{0};
    std::atomic<int> inflight{0};  //!< operations issued and not yet awaited to completion
    void* scratch = nullptr;       //!< one int32 of device memory for barrier()
    std::string failure;           //!< why the communicator was aborted (owner thread)
    int failure_code = 0;

    //! ncclCommAbort, once, from whichever thread gets here first.
    void abort_once() noexcept
    {
        if (!(flags.fetch_or(aborted, std::memory_order_acq_rel) & aborted)) api.abort(comm);
    }

    std::string who() const { return "tpipe::nccl::communicator rank " + std::to_string(rank) + " of " + std::to_string(size); }

    //! Runs `issue` (NCCL calls) as the owning thread; a cancel() meanwhile aborts from its thread.
    template <class Issue>
    void call(const char* what, Issue&& issue)
    {
        unsigned f = flags.load(std::memory_order_acquire);
        do {
            if (f & aborted)
                throw tpipe::error(who() + ": " + what + " after the communicator was aborted (" +
                                   (failure.empty() ? std::string("cancelled with work in flight") : failure) +
                                   "); an aborted NCCL communicator cannot be reused: bootstrap a new one");
            if (f & cancelled) throw operation_cancelled();
        } while (!flags.compare_exchange_weak(f, f | in_call, std::memory_order_acq_rel, std::memory_order_acquire));
        int rc = 0;
        try {
            rc = issue();
        } catch (...) {
            flags.fetch_and(~unsigned{in_call}, std::memory_order_acq_rel);
            throw;
        }
        const unsigned after = flags.fetch_and(~unsigned{in_call}, std::memory_order_acq_rel);
        if (rc != 0) {
            if (!(after & aborted)) throw nccl_error(who() + ": " + what + " failed: " + std::string(api.describe(rc, comm)), rc);
            throw operation_cancelled();
        }
    }
};

//! The health check the completion polls: cancellation, ncclCommGetAsyncError, the watchdog.
template <class Api>
struct health_check {
    comm_state<Api>* s;
    std::chrono::steady_clock::time_point deadline;
    std::string what;

    std::optional<std::string> operator()() const
    {
        const unsigned f = s->flags.load(std::memory_order_acquire);
        if (f & comm_state<Api>::cancelled) {
            s->abort_once();
            return "cancelled";
        }
        if (f & comm_state<Api>::aborted) return "aborted";
        if (const int rc = s->api.async_error(s->comm); rc != 0) {
            s->failure = "asynchronous NCCL error in " + what + ": " + std::string(s->api.describe(rc, s->comm));
            s->failure_code = rc;
            s->abort_once();
            return s->failure;
        }
        if (std::chrono::steady_clock::now() > deadline) {
            s->failure = what + " did not complete within " +
                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(s->opts.timeout).count()) +
                         " s (a peer died, or the members disagree on the order of operations); the communicator was aborted";
            s->failure_code = -1;
            s->abort_once();
            return s->failure;
        }
        return std::nullopt;
    }
};

//! The awaitable of one operation: api.after(stream, what, check), whose error becomes
//! operation_cancelled (after cancel()) or nccl_error.
template <class Api>
class [[nodiscard]] completion {
    using inner_t = decltype(std::declval<Api&>().after(std::declval<typename Api::stream_t>(), std::declval<const std::string&>(),
                                                        std::declval<health_check<Api>>()));

public:
    completion(comm_state<Api>* s, std::string what)
        : s_(s), inner_(s->api.after(s->stream, what, health_check<Api>{s, std::chrono::steady_clock::now() + s->opts.timeout, what}))
    {
        s_->inflight.fetch_add(1, std::memory_order_acq_rel);
    }
    completion(completion&& o) noexcept : s_(std::exchange(o.s_, nullptr)), inner_(std::move(o.inner_)) {}
    completion(const completion&) = delete;
    ~completion()
    {
        if (s_) s_->inflight.fetch_sub(1, std::memory_order_acq_rel);
    }

    bool await_ready() { return inner_.await_ready(); }
    auto await_suspend(std::coroutine_handle<> h) { return inner_.await_suspend(h); }
    void await_resume()
    {
        comm_state<Api>* s = std::exchange(s_, nullptr);
        s->inflight.fetch_sub(1, std::memory_order_acq_rel);
        try {
            inner_.await_resume();
        } catch (...) {
            if (!s->failure.empty()) throw nccl_error(s->who() + ": " + s->failure, s->failure_code);
            if (s->flags.load(std::memory_order_acquire) & comm_state<Api>::cancelled) throw operation_cancelled();
            throw;
        }
    }

private:
    comm_state<Api>* s_;
    inner_t inner_;
};

} // namespace detail

template <api Api>
class basic_communicator {
    using state = detail::comm_state<Api>;

public:
    using options = communicator_options;
    using comm_t = typename Api::comm_t;
    using stream_t = typename Api::stream_t;

    //! Member `rank` of `nranks` (ncclCommInitRank, blocking until every member called it) on
    //! the current GPU, with a stream of its own.
    static basic_communicator init(Api api, int nranks, const unique_id& id, int rank, options o = {})
    {
        struct unbounded {} here;
        return make(std::move(api), nranks, id, rank, here, o);
    }
    //! The same under `bound`'s set-up bound (tpipe/nccl/bounded_setup.hpp; with
    //! tpipe::mpi::setup_bound{}, the MPI environment's): ncclCommInitRank runs on a thread of
    //! its own with this thread's GPU current there, and a member that never arrives is named
    //! instead of waited for.
    template <bounds_setup Bound>
    static basic_communicator init(Api api, int nranks, const unique_id& id, int rank, Bound&& bound, options o = {})
    {
        return make(std::move(api), nranks, id, rank, bound, o);
    }

    //! Adopts NCCL communicator `comm` (destroyed with this object) as member `rank` of `size`;
    //! operations go on a stream of its own.
    basic_communicator(Api api, comm_t comm, int rank, int size, options o = {}) : s_(std::make_unique<state>())
    {
        s_->api = std::move(api);
        s_->comm = comm;
        s_->rank = rank;
        s_->size = size;
        s_->opts = o;
        try {
            s_->stream = s_->api.stream_create();
            s_->owns_stream = true;
            s_->scratch = s_->api.device_alloc(sizeof(std::int32_t));
        } catch (...) {
            release();  // the NCCL communicator is ours: destroy it
            throw;
        }
    }
    basic_communicator(basic_communicator&&) noexcept = default;
    basic_communicator& operator=(basic_communicator&& o) noexcept
    {
        if (this != &o) {
            release();
            s_ = std::move(o.s_);
            on_stop_ = std::move(o.on_stop_);
        }
        return *this;
    }
    ~basic_communicator() { release(); }

    int rank() const noexcept { return s_->rank; }
    int size() const noexcept { return s_->size; }
    comm_t native() const noexcept { return s_->comm; }
    //! The stream the operations run on (make work that produces their inputs happen before).
    stream_t stream() const noexcept { return s_->stream; }
    Api& api() noexcept { return s_->api; }

    //! In-place sum over every member of DEVICE memory; NCCL's order (see the header comment).
    template <class T>
        requires reducible<T>
    detail::completion<Api> all_reduce_sum(std::span<T> values)
    {
        return all_reduce(values, redop::sum, "all_reduce_sum");
    }

    //! In-place mean over every member (ncclAvg), on the GPU: data_parallel uses it to average,
    //! since the host cannot scale device memory.
    static constexpr bool tpipe_averaging_communicator = true;
    template <class T>
        requires reducible<T>
    detail::completion<Api> all_reduce_average(std::span<T> values)
    {
        return all_reduce(values, redop::average, "all_reduce_average");
    }

    //! Copies root's DEVICE bytes into every member's (same size everywhere).
    detail::completion<Api> broadcast(std::span<std::byte> bytes, int root)
    {
        check_member(root, "broadcast root");
        s_->call("broadcast", [&] { return s_->api.broadcast(bytes.data(), bytes.data(), bytes.size(), root, s_->comm, s_->stream); });
        return {s_.get(), s_->who() + ": broadcast of " + std::to_string(bytes.size()) + " bytes from rank " + std::to_string(root)};
    }

    detail::completion<Api> barrier()
    {
        s_->call("barrier", [&] { return s_->api.all_reduce(s_->scratch, s_->scratch, 1, dtype::i32, redop::sum, s_->comm, s_->stream); });
        return {s_.get(), s_->who() + ": barrier"};
    }

    //! ncclSend of DEVICE bytes; completes when they may be reused (the peer received them).
    detail::completion<Api> send(int peer, int tag, std::span<const std::byte> bytes)
    {
        check_p2p(peer, tag);
        s_->call("send", [&] { return s_->api.send(bytes.data(), bytes.size(), peer, s_->comm, s_->stream); });
        return {s_.get(), s_->who() + ": send of " + std::to_string(bytes.size()) + " bytes to rank " + std::to_string(peer) +
                              " (tag " + std::to_string(tag) + ")"};
    }

    //! ncclRecv into DEVICE bytes, exactly the sender's size (NCCL cannot check it).
    detail::completion<Api> recv(int peer, int tag, std::span<std::byte> bytes)
    {
        check_p2p(peer, tag);
        s_->call("recv", [&] { return s_->api.recv(bytes.data(), bytes.size(), peer, s_->comm, s_->stream); });
        return {s_.get(), s_->who() + ": recv of " + std::to_string(bytes.size()) + " bytes from rank " + std::to_string(peer) +
                              " (tag " + std::to_string(tag) + ")"};
    }

    //! ncclCommSplit (blocking, every member calls it): the members with the same color (>= 0)
    //! form a new communicator, ranked by (key, old rank).
    basic_communicator split(int color, int key)
    {
        if (color < 0)
            throw invalid_argument("tpipe::nccl::communicator::split: color " + std::to_string(color) + " on rank " + std::to_string(rank()) +
                                   " is negative; colors must be >= 0 (and every rank calls split)");
        comm_t c{};
        s_->call("split", [&] { return s_->api.split(s_->comm, color, key, c); });
        return basic_communicator(s_->api, c, s_->api.rank_of(c), s_->api.size_of(c), s_->opts);
    }

    //! See the header comment: aborts the NCCL communicator if work is in flight.
    void cancel() noexcept { canceller{s_.get()}(); }

    //! Clears a cancellation that aborted nothing, for the next iteration, which is cancelled
    //! once `stop` is stopped. Throws once the communicator was aborted.
    void reset(std::stop_token stop = {})
    {
        on_stop_.unwatch();
        if (s_->flags.load(std::memory_order_acquire) & state::aborted)
            throw tpipe::error(s_->who() + " was aborted (" +
                               (s_->failure.empty() ? std::string("cancelled with work in flight") : s_->failure) +
                               "); an aborted NCCL communicator cannot be reused: bootstrap a new one");
        if (s_->inflight.load(std::memory_order_acquire) != 0)
            throw tpipe::error(s_->who() + ": reset() while " + std::to_string(s_->inflight.load()) +
                               " operations are in flight; await them first");
        s_->flags.fetch_and(~unsigned{state::cancelled}, std::memory_order_acq_rel);
        on_stop_.watch(std::move(stop), canceller{s_.get()});
    }

    //! Whether the NCCL communicator was aborted (by cancel(), an error or the watchdog).
    bool aborted() const noexcept { return s_->flags.load(std::memory_order_acquire) & state::aborted; }

private:
    //! init's work: ncclCommInitRank, bounded by `bound` where it bounds set-up (bounded_init_rank).
    template <class Bound>
    static basic_communicator make(Api api, int nranks, const unique_id& id, int rank, Bound& bound, options o)
    {
        if (nranks < 1 || rank < 0 || rank >= nranks)
            throw invalid_argument("tpipe::nccl::communicator::init: rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
                                   "; ranks are 0..nranks-1 and nranks >= 1");
        const auto [rc, c] = detail::bounded_init_rank(api, bound, "tpipe::nccl::communicator::init: ncclCommInitRank", nranks, id, rank);
        if (rc != 0)
            throw nccl_error("tpipe::nccl::communicator::init: ncclCommInitRank (rank " + std::to_string(rank) + " of " +
                                 std::to_string(nranks) + ") failed: " + std::string(api.describe(rc, c)),
                             rc);
        return basic_communicator(std::move(api), c, rank, nranks, o);
    }

    template <class T>
    detail::completion<Api> all_reduce(std::span<T> values, redop op, const char* what)
    {
        s_->call(what, [&] { return s_->api.all_reduce(values.data(), values.data(), values.size(), dtype_of<T>, op, s_->comm, s_->stream); });
        return {s_.get(), s_->who() + ": " + what + " of " + std::to_string(values.size()) + " " + dtype_name(dtype_of<T>)};
    }

    void release() noexcept
    {
        on_stop_.unwatch();
        if (!s_) return;
        if (!(s_->flags.load(std::memory_order_acquire) & state::aborted)) {
            if (s_->inflight.load(std::memory_order_acquire) != 0) s_->abort_once();  // nobody will wait for it
            else s_->api.destroy(s_->comm);
        }
        if (s_->scratch) s_->api.device_free(s_->scratch);
        if (s_->owns_stream) s_->api.stream_destroy(s_->stream);
        s_.reset();
    }

    void check_member(int r, const char* what) const
    {
        if (r < 0 || r >= size())
            throw invalid_argument(std::string("tpipe::nccl::communicator: ") + what + " " + std::to_string(r) +
                                   " is not a member; members are 0.." + std::to_string(size() - 1));
    }
    void check_p2p(int peer, int tag) const
    {
        check_member(peer, "peer");
        if (peer == rank())
            throw invalid_argument("tpipe::nccl::communicator: rank " + std::to_string(rank()) +
                                   " sends to or receives from itself; NCCL point-to-point needs a peer");
        if (tag < 0) throw invalid_argument("tpipe::nccl::communicator: tag " + std::to_string(tag) + " is negative; tags are >= 0");
    }

    struct canceller {
        state* s;
        void operator()() const noexcept
        {
            const unsigned before = s->flags.fetch_or(state::cancelled, std::memory_order_acq_rel);
            if (before & state::in_call) s->abort_once();
        }
    };

    std::unique_ptr<state> s_;
    on_stop<canceller> on_stop_;
};

} // namespace tpipe::nccl
