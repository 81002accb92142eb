#pragma once
// completion_mode::host_func: a host function enqueued after the work (cudaLaunchHostFunc) posts
// the waiting coroutine to its loop. The host function runs on a driver thread: it only posts
// (atomics and a futex wake, no CUDA call, no allocation); the coroutine resumes on its loop.
//
// The host function's argument is a slot of a basic_host_func_waits registry, not the awaiter:
// a cancelled wait resumes before its host function has run, which may run later (or never,
// since CUDA skips host functions after a stream error). A slot is reused once both sides are
// done with it. When the registry goes, slots whose stream failed are freed (their host
// functions never run); slots whose host function may still run stay allocated, with the
// registry's core, until the last of them has run (a GPU that never finishes leaks them).
//
// Errors: the wait also records a pooled event before the host function; after the wake-up the
// awaiter queries it, so a failed stream is a cuda_error naming the work. A stream error also
// stops the host function, so that wait ends only by cancellation (the watchdog, in tpipe::run):
// event_poll names such errors at once, and is the default.
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/cuda/basic_after.hpp"
#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"

namespace tpipe::cuda {

namespace detail {
struct host_func_core;

struct host_func_slot {
    enum : int { armed, fired, cancelled };
    std::atomic<int> state{armed};
    std::atomic<int> refs{0};  //!< the host function and the awaiter
    wake_node* node = nullptr;
    loop* home = nullptr;
    host_func_core* owner = nullptr;
    host_func_slot* prev = nullptr;  //!< in the owner's list of armed slots
    host_func_slot* next = nullptr;
    std::uintptr_t stream = 0;       //!< the stream it waits on (to ask, at the end, whether it failed)
};

//! The slots of one registry. It outlives the registry while host functions may still run.
struct host_func_core {
    std::mutex m;
    host_func_slot* armed = nullptr;
    std::vector<host_func_slot*> all, free;
    std::size_t outstanding = 0;  //!< slots that a host function or an awaiter still holds
    bool orphaned = false;        //!< the registry is gone: the last drop frees everything

    ~host_func_core()
    {
        for (host_func_slot* s : all) delete s;
    }

    //! One side is done with `s`; the last one returns it (from any thread, a driver thread too).
    static void drop(host_func_slot* s) noexcept
    {
        if (s->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
        host_func_core* c = s->owner;
        bool last = false;
        {
            std::lock_guard<std::mutex> g(c->m);
            c->free.push_back(s);  // capacity reserved when the slot was made: no allocation here
            --c->outstanding;
            last = c->orphaned && c->outstanding == 0;
        }
        if (last) delete c;
    }
};
} // namespace detail

//! The slots of the host-function waits of one engine, and their cancellation.
template <driver D>
class basic_host_func_waits {
public:
    explicit basic_host_func_waits(D& d) : d_(d), core_(new detail::host_func_core) {}
    basic_host_func_waits(const basic_host_func_waits&) = delete;
    basic_host_func_waits& operator=(const basic_host_func_waits&) = delete;
    //! Frees the slots, except those whose host function may still run: they go when it has run
    //! (a slot whose stream failed is freed now: CUDA runs no host function after a stream error).
    ~basic_host_func_waits() { close(); }

    //! What the destructor does; call it before destroying the streams (it asks them whether
    //! they failed). Idempotent; the registry is unusable afterwards.
    void close() noexcept
    {
        if (!core_) return;
        bool last = false;
        {
            std::lock_guard<std::mutex> g(core_->m);
            for (detail::host_func_slot* s : core_->all) {
                if (s->refs.load(std::memory_order_acquire) != 1 || s->prev || s == core_->armed) continue;
                const int q = d_.stream_query(reinterpret_cast<typename D::stream_type>(s->stream));
                if (q == 0 || q == D::not_ready) continue;  // its host function may still run
                s->refs.store(0, std::memory_order_relaxed);
                core_->free.push_back(s);
                --core_->outstanding;
            }
            core_->orphaned = true;
            last = core_->outstanding == 0;
        }
        if (last) delete core_;
        core_ = nullptr;
    }

    //! Posts every armed wait (any thread): they resume with operation_cancelled.
    void cancel_all() noexcept
    {
        std::lock_guard<std::mutex> g(core_->m);
        for (detail::host_func_slot* s = core_->armed; s; s = s->next) {
            int expected = detail::host_func_slot::armed;
            if (s->state.compare_exchange_strong(expected, detail::host_func_slot::cancelled, std::memory_order_acq_rel))
                s->home->post(s->node);
        }
    }

    //! Slots allocated so far (a steady state allocates none).
    std::size_t allocated() const
    {
        std::lock_guard<std::mutex> g(core_->m);
        return core_->all.size();
    }
    //! Slots still held by a host function or an awaiter.
    std::size_t outstanding() const
    {
        std::lock_guard<std::mutex> g(core_->m);
        return core_->outstanding;
    }

    //! The host function: posts the wait unless it was cancelled. Runs on a driver thread.
    static void on_host(void* p) noexcept
    {
        auto* s = static_cast<detail::host_func_slot*>(p);
        int expected = detail::host_func_slot::armed;
        if (s->state.compare_exchange_strong(expected, detail::host_func_slot::fired, std::memory_order_acq_rel))
            s->home->post(s->node);
        detail::host_func_core::drop(s);
    }

    detail::host_func_slot* acquire(loop* home, wake_node* node, typename D::stream_type stream)
    {
        std::lock_guard<std::mutex> g(core_->m);
        detail::host_func_slot* s = nullptr;
        if (!core_->free.empty()) {
            s = core_->free.back();
            core_->free.pop_back();
        } else {
            core_->all.reserve(core_->all.size() + 1);
            core_->free.reserve(core_->all.size() + 1);
            s = new detail::host_func_slot;
            s->owner = core_;
            core_->all.push_back(s);
        }
        ++core_->outstanding;
        s->state.store(detail::host_func_slot::armed, std::memory_order_relaxed);
        s->refs.store(2, std::memory_order_relaxed);
        s->home = home;
        s->node = node;
        s->stream = reinterpret_cast<std::uintptr_t>(stream);
        s->prev = nullptr;
        s->next = core_->armed;
        if (core_->armed) core_->armed->prev = s;
        core_->armed = s;
        return s;
    }

    //! The awaiter is done with the slot (resumed): no longer cancellable.
    void disarm(detail::host_func_slot* s) noexcept
    {
        {
            std::lock_guard<std::mutex> g(core_->m);
            if (s->prev) s->prev->next = s->next;
            else core_->armed = s->next;
            if (s->next) s->next->prev = s->prev;
            s->prev = s->next = nullptr;
        }
        detail::host_func_core::drop(s);
    }

    //! The host function never will run (it could not be launched).
    void never_fires(detail::host_func_slot* s) noexcept { detail::host_func_core::drop(s); }

private:
    D& d_;
    detail::host_func_core* core_;
};

//! Awaits the work enqueued on a stream so far by a host function (see above). Awaited on a
//! loop's thread only. Not movable once awaited.
template <driver D>
class [[nodiscard]] basic_host_func_wait {
public:
    using stream_type = typename D::stream_type;

    basic_host_func_wait(basic_host_func_waits<D>& waits, basic_event_pool<D>& pool, D& d, stream_type s, int gpu,
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
        slot_ = waits_.acquire(l, &node_, stream_);
        const int rc = d_.launch_host_func(stream_, &basic_host_func_waits<D>::on_host, slot_);
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
    basic_host_func_waits<D>& waits_;
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
