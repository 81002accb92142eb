#pragma once
// completion_mode::host_func: a host function enqueued after the work (cudaLaunchHostFunc) posts
// the waiting coroutine to its loop. The host function runs on a driver thread: it only posts
// (atomics and a futex wake, no CUDA call, no allocation); the coroutine resumes on its loop.
//
// The host function's argument is a slot owned by a host_func_waits registry, not the awaiter:
// a cancelled wait resumes before its host function has run, which may run later (or never,
// since CUDA skips host functions after a stream error). A slot is reused once both sides are
// done with it; slots whose host function never ran are left allocated when the registry goes
// (leaked(): freeing them could let a late host function write freed memory).
//
// Errors: the wait also records a pooled event before the host function; after the wake-up the
// awaiter queries it, so a failed stream is a cuda_error naming the work. A stream error also
// stops the host function, so that wait ends only by cancellation (the watchdog, in tpipe::run):
// event_poll names such errors at once, and is the default.
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "tpipe/cuda/basic_after.hpp"
#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/exec/errors.hpp"
#include "tpipe/exec/loop.hpp"

namespace tpipe::cuda {

class host_func_waits;

namespace detail {
struct host_func_slot {
    enum : int { armed, fired, cancelled };
    std::atomic<int> state{armed};
    std::atomic<int> refs{0};  //!< the host function and the awaiter
    wake_node* node = nullptr;
    loop* home = nullptr;
    host_func_waits* owner = nullptr;
    host_func_slot* prev = nullptr;  //!< in the owner's list of armed slots, or its free list
    host_func_slot* next = nullptr;
};
} // namespace detail

//! The slots of the host-function waits of one engine, and their cancellation.
class host_func_waits {
public:
    host_func_waits() = default;
    host_func_waits(const host_func_waits&) = delete;
    host_func_waits& operator=(const host_func_waits&) = delete;
    ~host_func_waits() { reset(); }

    //! Frees the idle slots; slots still armed or whose host function has not run are left.
    void reset() noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        while (free_) delete std::exchange(free_, free_->next);
    }

    //! Posts every armed wait (any thread): they resume with operation_cancelled.
    void cancel_all() noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        for (detail::host_func_slot* s = armed_; s; s = s->next) {
            int expected = detail::host_func_slot::armed;
            if (s->state.compare_exchange_strong(expected, detail::host_func_slot::cancelled, std::memory_order_acq_rel))
                s->home->post(s->node);
        }
    }

    //! Slots allocated so far (a steady state allocates none).
    std::size_t allocated() const
    {
        std::lock_guard<std::mutex> g(m_);
        return allocated_;
    }
    //! Slots whose host function had not run when they were last looked at (cancelled waits).
    std::size_t outstanding() const
    {
        std::lock_guard<std::mutex> g(m_);
        return allocated_ - free_count_;
    }

    //! The host function: posts the wait unless it was cancelled.
    static void on_host(void* p) noexcept
    {
        auto* s = static_cast<detail::host_func_slot*>(p);
        int expected = detail::host_func_slot::armed;
        if (s->state.compare_exchange_strong(expected, detail::host_func_slot::fired, std::memory_order_acq_rel))
            s->home->post(s->node);
        s->owner->drop(s);
    }

private:
    template <driver D>
    friend class basic_host_func_wait;

    detail::host_func_slot* acquire(loop* home, wake_node* node)
    {
        std::lock_guard<std::mutex> g(m_);
        detail::host_func_slot* s = free_;
        if (s) {
            free_ = s->next;
            --free_count_;
        } else {
            s = new detail::host_func_slot;
            ++allocated_;
        }
        s->state.store(detail::host_func_slot::armed, std::memory_order_relaxed);
        s->refs.store(2, std::memory_order_relaxed);
        s->home = home;
        s->node = node;
        s->owner = this;
        s->prev = nullptr;
        s->next = armed_;
        if (armed_) armed_->prev = s;
        armed_ = s;
        return s;
    }

    //! The awaiter is done with the slot (resumed): no longer cancellable.
    void disarm(detail::host_func_slot* s) noexcept
    {
        {
            std::lock_guard<std::mutex> g(m_);
            if (s->prev) s->prev->next = s->next;
            else armed_ = s->next;
            if (s->next) s->next->prev = s->prev;
            s->prev = s->next = nullptr;
        }
        drop(s);
    }

    //! The host function never will run (it could not be launched).
    void never_fires(detail::host_func_slot* s) noexcept { drop(s); }

    void drop(detail::host_func_slot* s) noexcept
    {
        if (s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        std::lock_guard<std::mutex> g(m_);
        s->next = free_;
        free_ = s;
        ++free_count_;
    }

    mutable std::mutex m_;
    detail::host_func_slot* armed_ = nullptr;
    detail::host_func_slot* free_ = nullptr;
    std::size_t allocated_ = 0, free_count_ = 0;
};

//! Awaits the work enqueued on a stream so far by a host function (see above). Awaited on a
//! loop's thread only. Not movable once awaited.
template <driver D>
class [[nodiscard]] basic_host_func_wait {
public:
    using stream_type = typename D::stream_type;

    basic_host_func_wait(host_func_waits& waits, basic_event_pool<D>& pool, D& d, stream_type s, int gpu,
                         const std::string* what, const std::atomic<bool>* cancelled)
        : waits_(waits), pool_(pool), d_(d), stream_(s), gpu_(gpu), what_(what), cancelled_(cancelled)
    {
        event_ = pool_.acquire(gpu_);
        const int rc = d_.event_record(event_, stream_);
        if (rc != 0) {
            pool_.release(gpu_, event_);
            has_event_ = false;
            detail::check(d_, rc, "cudaEventRecord", *what_);
        }
    }
    basic_host_func_wait(const basic_host_func_wait&) = delete;
    basic_host_func_wait& operator=(const basic_host_func_wait&) = delete;
    ~basic_host_func_wait()
    {
        if (has_event_) pool_.release(gpu_, event_);
    }

    bool await_ready() const noexcept { return cancelled_ && cancelled_->load(std::memory_order_acquire); }

    bool await_suspend(std::coroutine_handle<> h)
    {
        loop* l = loop::current();
        if (!l)
            throw error("cuda::engine (completion_mode::host_func): a compute was awaited on a thread that drives no "
                        "tpipe::loop; await it from a loop (tpipe::run does) or use completion_mode::event_poll");
        node_.handle = h;
        slot_ = waits_.acquire(l, &node_);
        const int rc = d_.launch_host_func(stream_, &host_func_waits::on_host, slot_);
        if (rc != 0) {
            waits_.never_fires(slot_);
            waits_.disarm(std::exchange(slot_, nullptr));
            detail::check(d_, rc, "cudaLaunchHostFunc", *what_);
        }
        // Cancelled between await_ready and now: cancel_all may have missed this slot.
        if (cancelled_ && cancelled_->load(std::memory_order_acquire)) waits_.cancel_all();
        return true;
    }

    void await_resume()
    {
        bool fired = true;
        if (slot_) {
            fired = slot_->state.load(std::memory_order_acquire) == detail::host_func_slot::fired;
            waits_.disarm(std::exchange(slot_, nullptr));
        }
        // After the host function ran the event has completed; after a cancellation it may not
        // have, or may name the stream's error.
        const int rc = d_.event_query(event_);
        if (rc != 0 && rc != D::not_ready)
            detail::check(d_, rc, "cudaEventQuery", *what_ + ": the work enqueued on its stream failed");
        if (!fired || (cancelled_ && cancelled_->load(std::memory_order_acquire))) throw operation_cancelled();
    }

private:
    host_func_waits& waits_;
    basic_event_pool<D>& pool_;
    D& d_;
    stream_type stream_;
    int gpu_;
    const std::string* what_;
    const std::atomic<bool>* cancelled_;
    typename D::event_type event_{};
    bool has_event_ = true;
    detail::host_func_slot* slot_ = nullptr;
    wake_node node_{};
};

} // namespace tpipe::cuda
