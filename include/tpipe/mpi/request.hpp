#pragma once
// tpipe::mpi::request_wait: awaits one posted MPI request from a tpipe::loop.
//
//   MPI_Request r;
//   tpipe::mpi::check(MPI_Irecv(buf, n, MPI_BYTE, peer, tag, comm, &r), "MPI_Irecv");
//   auto done = tpipe::mpi::completion(r, &cancel_flag);   // owns r from here
//   ... compute ...                                        // the progress thread moves the data
//   co_await done;                                         // done.status() holds the MPI_Status
//
// Semantics
// - From construction until completion the request counts as outstanding for the progress
//   thread (tpipe/mpi/progress.hpp), so the transfer progresses before it is awaited.
// - await_ready tests the request once (MPI_Test). Otherwise await_suspend (tpipe::polled_awaiter)
//   registers the awaiter as a tpipe::poller of loop::current() (it is on the loop's own thread); the
//   loop tests it while idle (a loop with pollers spins instead of sleeping) and resumes the
//   coroutine on that loop once the request completes.
// - Awaited where no loop is current (a plain thread), it tests in a loop on that thread,
//   yielding the core between tests, and continues without suspending. tpipe::sync_wait
//   drives a loop, so under sync_wait the poller path is used.
// - Errors: a failed request resumes with tpipe::mpi::mpi_error naming the call.
// - Cancellation: once *cancelled is true, the awaiter resumes with tpipe::operation_cancelled.
//   A point-to-point request is MPI_Cancel'ed and tested for up to 20 ms; if it has not
//   completed by then (Open MPI cannot cancel a send), it is MPI_Request_free'd and MPI may
//   still read or write its buffer: keep the buffer alive, the job is expected to end. A
//   collective request cannot be cancelled or freed in MPI: it is abandoned (the communicator
//   that posted it is unusable afterwards).
// - Movable until awaited; not after (the loop holds a pointer to it). Destroying an awaiter
//   whose request is still active cancels it as above, without waiting.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <thread>
#include <utility>

#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/polled_awaiter.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/progress.hpp"

namespace tpipe::mpi {

//! Whether MPI_Cancel applies to a request (point-to-point) or not (nonblocking collective).
enum class request_kind : unsigned char { point_to_point, collective };

class [[nodiscard]] request_wait final : public polled_awaiter<request_wait> {
public:
    //! Takes ownership of a posted request (MPI_REQUEST_NULL: completes at once).
    //! `what` names the call in error messages (a string literal).
    explicit request_wait(MPI_Request posted, const std::atomic<bool>* cancelled = nullptr, MPI_Status* status_out = nullptr,
                          request_kind kind = request_kind::point_to_point, const char* what = "MPI request") noexcept
        : req_(posted), cancelled_(cancelled), out_(status_out), kind_(kind), what_(what)
    {
        if (req_ != MPI_REQUEST_NULL) detail::begin_outstanding();
    }
    request_wait(request_wait&& o) noexcept
        : req_(std::exchange(o.req_, MPI_REQUEST_NULL)), status_(o.status_), cancelled_(o.cancelled_), out_(o.out_), kind_(o.kind_),
          what_(o.what_), error_(std::move(o.error_))
    {
    }
    request_wait(const request_wait&) = delete;
    request_wait& operator=(const request_wait&) = delete;
    request_wait& operator=(request_wait&&) = delete;
    ~request_wait()
    {
        if (req_ != MPI_REQUEST_NULL) abandon();
    }

    bool await_ready()
    {
        if (req_ == MPI_REQUEST_NULL) {
            if (!error_ && is_cancelled()) error_ = std::make_exception_ptr(operation_cancelled());
            return true;
        }
        return settle();
    }

    void await_resume()
    {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

    //! The status of the completed request (for a receive: MPI_SOURCE, MPI_TAG, MPI_Get_count).
    const MPI_Status& status() const noexcept { return status_; }
    //! Bytes received by a completed receive.
    std::size_t received_bytes() const noexcept
    {
        int n = 0;
        MPI_Get_count(&status_, MPI_BYTE, &n);
        return n == MPI_UNDEFINED ? 0 : static_cast<std::size_t>(n);
    }

private:
    friend class polled_awaiter<request_wait>;

    bool is_cancelled() const noexcept { return cancelled_ && cancelled_->load(std::memory_order_acquire); }

    //! Tests once; true when finished (completed, failed or cancelled; req_ is null then).
    bool settle() noexcept
    {
        if (is_cancelled()) {
            if (kind_ == request_kind::collective) {
                req_ = MPI_REQUEST_NULL;  // abandoned: MPI allows neither MPI_Cancel nor MPI_Request_free
                return finish(std::make_exception_ptr(operation_cancelled()));
            }
            if (!cancel_requested_) {
                cancel_requested_ = true;
                MPI_Cancel(&req_);
                cancel_deadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
            }
        }
        int flag = 0;
        const int rc = MPI_Test(&req_, &flag, &status_);
        detail::note_tested();
        if (rc != MPI_SUCCESS) {
            if (req_ != MPI_REQUEST_NULL) MPI_Request_free(&req_);
            req_ = MPI_REQUEST_NULL;
            return finish(make_error(rc));
        }
        if (flag) {
            req_ = MPI_REQUEST_NULL;
            if (cancel_requested_) return finish(std::make_exception_ptr(operation_cancelled()));
            if (out_) *out_ = status_;
            return finish(nullptr);
        }
        if (cancel_requested_ && std::chrono::steady_clock::now() >= cancel_deadline_) {
            MPI_Request_free(&req_);
            req_ = MPI_REQUEST_NULL;
            return finish(std::make_exception_ptr(operation_cancelled()));
        }
        return false;
    }

    bool finish(std::exception_ptr e) noexcept
    {
        error_ = std::move(e);
        detail::end_outstanding();
        return true;
    }

    std::exception_ptr make_error(int rc) const noexcept
    {
        try {
            return std::make_exception_ptr(mpi_error(error_message(rc, what_), rc));
        } catch (...) {
            return std::current_exception();
        }
    }

    void abandon() noexcept
    {
        if (kind_ == request_kind::point_to_point) {
            MPI_Cancel(&req_);
            MPI_Request_free(&req_);
        }
        req_ = MPI_REQUEST_NULL;
        detail::end_outstanding();
    }

    MPI_Request req_ = MPI_REQUEST_NULL;
    MPI_Status status_{};
    const std::atomic<bool>* cancelled_ = nullptr;
    MPI_Status* out_ = nullptr;
    request_kind kind_ = request_kind::point_to_point;
    const char* what_ = "MPI request";
    bool cancel_requested_ = false;
    std::chrono::steady_clock::time_point cancel_deadline_{};
    std::exception_ptr error_{};
};

//! Awaitable completion of a posted point-to-point request (see request_wait).
inline request_wait completion(MPI_Request posted, const std::atomic<bool>* cancelled = nullptr, MPI_Status* status_out = nullptr) noexcept
{
    return request_wait(posted, cancelled, status_out);
}

} // namespace tpipe::mpi
