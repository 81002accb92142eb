#pragma once
// The machinery of tpipe::mpi::communicator's collectives (tpipe/mpi/communicator.hpp): the
// per-communicator state and tpipe::mpi::detail::collective_op, one collective as a state machine
// of nonblocking MPI phases that the loop polls. Collectives of one communicator run one after
// another, in the order they are awaited (the queue's head runs).
#include <mpi.h>

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/polled_awaiter.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/mpi/request.hpp"
#include "tpipe/mpi/stall_watch.hpp"

namespace tpipe::mpi {

//! Bytes one member's ring collectives have sent and received so far (payload only): what a
//! ring all-reduce of n bytes over d members costs is 2 n (d - 1) / d each way.
struct collective_traffic {
    std::uint64_t sent = 0, received = 0;
};

namespace detail {

using tpipe::reducible;  // comm/communicator.hpp: the element types every communicator reduces

template <reducible T>
inline MPI_Datatype datatype() noexcept
{
    if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
    else if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
    else if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
    else return MPI_INT64_T;
}

class collective_op;

struct comm_state {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Comm ring_comm = MPI_COMM_NULL;  //!< a private duplicate for the ring's messages (never match the user's)
    int rank = 0, size = 1;
    std::atomic<bool> cancelled{false};
    bool broken = false;  //!< a collective was abandoned by a cancellation
    reduction_order order = reduction_order::ring;
    std::size_t chunk_bytes = std::size_t{1} << 20;
    std::vector<std::byte> scratch;  //!< the ring's receive pieces, or rank 0's gather buffer; reused
    collective_traffic traffic{};
    collective_op* head = nullptr;   //!< collectives in await order; the head runs
    collective_op* tail = nullptr;
    std::uint64_t collectives = 0;   //!< collectives started so far (numbers them in the watchdog's report)
    std::unique_ptr<stall_watch> watch;  //!< communicator::set_watchdog; null: none

};

//! One collective as a small state machine of nonblocking MPI phases, polled from the loop.
class collective_op : public polled_awaiter<collective_op> {
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
                "tpipe::mpi::communicator: a collective was abandoned by a cancellation, so this communicator is unusable; end the job"));
            return true;
        }
        if (s_->size == 1 && trivial_when_alone()) return true;
        return false;
    }

    bool await_suspend(std::coroutine_handle<> h)
    {
        enqueue();
        if (settle()) return false;
        return polled_awaiter::await_suspend(h);
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
    friend class polled_awaiter<collective_op>;

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
    bool settle() noexcept
    {
        if (s_->cancelled.load(std::memory_order_acquire)) {
            if (started_) s_->broken = true;  // MPI can neither cancel nor free a collective request
            return finish(std::make_exception_ptr(operation_cancelled()));
        }
        if (s_->head != this) return false;
        if (!started_) {
            started_ = true;
            seq_ = ++s_->collectives;
            moved_at_ = watch_clock::now();
            moved_ = s_->traffic.received;
        }
        bool finished = false;
        const int rc = drive(finished);
        detail::note_tested();
        if (rc != MPI_SUCCESS) {
            s_->broken = true;
            return finish(error_of(rc));
        }
        if (finished) return finish(nullptr);
        return s_->watch ? watched() : false;
    }

    //! With a watchdog: true once the collective has made no progress for its bound (it then
    //! fails with tpipe::watchdog_error, also written to stderr: the job is expected to end with
    //! MPI_Abort, which may come before anyone prints the exception).
    bool watched() noexcept
    {
        if (s_->traffic.received != moved_) {  // the ring moved a piece: progress
            moved_ = s_->traffic.received;
            moved_at_ = watch_clock::now();
        }
        try {
            const std::string report = s_->watch->poll(name(), seq_, moved_at_);
            if (report.empty()) return false;
            s_->broken = true;
            member_stalled().store(true, std::memory_order_relaxed);
            std::fprintf(stderr, "%s\n", report.c_str());
            std::fflush(stderr);
            return finish(std::make_exception_ptr(watchdog_error(report)));
        } catch (...) {
            s_->broken = true;
            return finish(std::current_exception());
        }
    }

    std::exception_ptr error_of(int rc) const noexcept
    {
        try {
            return std::make_exception_ptr(mpi_error(error_message(rc, name()), rc));
        } catch (...) {
            return std::current_exception();
        }
    }

    collective_op* next_ = nullptr;
    bool started_ = false;
    std::uint64_t seq_ = 0;                //!< its number among the communicator's collectives
    std::uint64_t moved_ = 0;              //!< traffic received when it last moved
    watch_clock::time_point moved_at_{};
    std::exception_ptr error_{};
};

} // namespace detail

} // namespace tpipe::mpi
