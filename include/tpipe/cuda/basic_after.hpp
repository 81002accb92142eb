#pragma once
// tpipe::cuda::basic_after: awaits the work enqueued on a stream so far, from a tpipe::loop.
//
//   co_await after(stream, "rank 1 stage 1 F(unit 3)");          // after.hpp: the CUDA runtime
//   co_await after(stream, what, [&] { return health(); });     // a health check polled alongside
//
// Semantics
// - Construction records a pooled timing-disabled event on the stream (so it covers the work
//   enqueued before it), on the stream's GPU.
// - await_ready queries the event once. Otherwise await_suspend registers the awaiter as a
//   tpipe::poller of loop::current() (it is on the loop's own thread then); the loop queries the
//   event while idle and resumes the coroutine on that loop, never on a driver thread. Awaited
//   where no loop is current (a plain thread), it queries in a loop there, yielding the core.
// - Errors: a failed query (the stream's work failed) resumes with cuda_error naming `what`, the
//   call and the CUDA error; a health check that returns a message resumes with cuda_error
//   (code -1) naming `what` and that message.
// - Cancellation: once *cancelled is true it resumes with tpipe::operation_cancelled (the work
//   may still run; its event goes back to the pool, where re-recording it is allowed).
// - Movable until awaited; not after (the loop holds a pointer to it).
#include <atomic>
#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/polled_awaiter.hpp"

namespace tpipe::cuda {

//! How a CUDA engine learns that a compute's work completed.
enum class completion_mode {
    event_poll,  //!< the device's loop queries a pooled event while idle (default)
    host_func,   //!< cudaLaunchHostFunc posts the coroutine to its loop; the loop may sleep
};

//! The health check that finds nothing wrong.
struct no_check {
    std::optional<std::string> operator()() const noexcept { return std::nullopt; }
};

template <driver D, class Check = no_check>
class [[nodiscard]] basic_after final : public polled_awaiter<basic_after<D, Check>> {
public:
    using stream_type = typename D::stream_type;
    using event_type = typename D::event_type;

    //! Records an event of `pool` on `s` (a stream of `gpu`). Throws cuda_error if recording fails.
    basic_after(basic_event_pool<D>& pool, D& d, stream_type s, int gpu, std::string what, Check check = {},
                const std::atomic<bool>* cancelled = nullptr)
        : pool_(&pool), d_(&d), gpu_(gpu), owned_what_(std::move(what)), check_(std::move(check)), cancelled_(cancelled)
    {
        record(s);
    }
    //! The same, naming the work by a string that outlives the awaiter (no copy: the engine's).
    basic_after(basic_event_pool<D>& pool, D& d, stream_type s, int gpu, const std::string* what, Check check = {},
                const std::atomic<bool>* cancelled = nullptr)
        : pool_(&pool), d_(&d), gpu_(gpu), what_(what), check_(std::move(check)), cancelled_(cancelled)
    {
        record(s);
    }
    basic_after(basic_after&& o) noexcept
        : pool_(std::exchange(o.pool_, nullptr)), d_(o.d_), gpu_(o.gpu_), event_(o.event_), what_(o.what_),
          owned_what_(std::move(o.owned_what_)), check_(std::move(o.check_)), cancelled_(o.cancelled_),
          error_(std::move(o.error_))
    {
    }
    basic_after(const basic_after&) = delete;
    basic_after& operator=(const basic_after&) = delete;
    basic_after& operator=(basic_after&&) = delete;
    ~basic_after() { give_back(); }

    bool await_ready() { return pool_ == nullptr || settle(); }

    void await_resume()
    {
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

private:
    const std::string& what() const noexcept { return what_ ? *what_ : owned_what_; }

    void record(stream_type s)
    {
        event_ = pool_->acquire(gpu_);
        const int rc = d_->event_record(event_, s);
        if (rc != 0) {
            pool_->release(gpu_, event_);
            pool_ = nullptr;
            detail::check(*d_, rc, "cudaEventRecord", what());
        }
    }

    friend class polled_awaiter<basic_after>;

    //! Queries once; true when finished (completed, failed or cancelled; the event is back then).
    bool settle() noexcept
    {
        if (cancelled_ && cancelled_->load(std::memory_order_acquire))
            return finish(std::make_exception_ptr(operation_cancelled()));
        try {
            if (auto bad = check_()) return finish(std::make_exception_ptr(cuda_error(what() + ": " + *bad, -1, "health check")));
        } catch (...) {
            return finish(std::current_exception());
        }
        const int rc = d_->event_query(event_);
        if (rc == D::not_ready) return false;
        if (rc == 0) return finish(nullptr);
        try {
            detail::check(*d_, rc, "cudaEventQuery", what() + ": the work enqueued on its stream failed");
        } catch (...) {
            return finish(std::current_exception());
        }
        return finish(nullptr);
    }

    bool finish(std::exception_ptr e) noexcept
    {
        error_ = std::move(e);
        give_back();
        return true;
    }

    void give_back() noexcept
    {
        if (pool_) std::exchange(pool_, nullptr)->release(gpu_, event_);
    }

    basic_event_pool<D>* pool_;  //!< null once the event went back
    D* d_;
    int gpu_;
    event_type event_{};
    const std::string* what_ = nullptr;  //!< borrowed name, or null: owned_what_
    std::string owned_what_;
    [[no_unique_address]] Check check_;
    const std::atomic<bool>* cancelled_;
    std::exception_ptr error_{};
};

//! basic_after on `s`, on the GPU the driver says the stream belongs to (events of `pool`).
template <driver D, class Check = no_check>
basic_after<D, Check> after_on(basic_event_pool<D>& pool, D& d, typename D::stream_type s, std::string what, Check check = {},
                               const std::atomic<bool>* cancelled = nullptr)
{
    int gpu = 0;
    detail::check(d, d.stream_device(s, &gpu), "cudaStreamGetDevice", what);
    return basic_after<D, Check>(pool, d, s, gpu, std::move(what), std::move(check), cancelled);
}

} // namespace tpipe::cuda
