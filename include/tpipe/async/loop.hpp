#pragma once
// tpipe::loop: the event loop of one device. One thread drives it; it resumes the coroutines
// of the stages placed on that device, one at a time, in the order they became ready.
//
// - Work posted from the loop's own thread goes onto a local FIFO (no atomics).
// - Work posted from other threads goes onto a lock-free multi-producer stack that the loop
//   drains in one exchange (intrusive: the node lives in the suspended coroutine's awaiter, so
//   posting never allocates).
// - Pollers (a CUDA event, an MPI request, a test double) are polled while the loop is idle;
//   a loop with pollers spins instead of sleeping.
// - An idle loop spins for `spin` while held (an iteration is running on it) or `cold_spin`
//   otherwise (default 50 us each), pausing for the first 20 us and yielding the core after
//   that, then sleeps on an atomic (futex) until a post from another thread wakes it.
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tpipe {

namespace detail {
inline void cpu_relax() noexcept
{
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
}
} // namespace detail

class loop;

//! An intrusive queue entry: a suspended coroutine to resume on a loop. It lives inside the
//! awaiter that suspended the coroutine, so it stays valid until the coroutine is resumed.
struct wake_node {
    wake_node* next = nullptr;
    std::coroutine_handle<> handle{};
};

//! Something the loop polls while idle: it returns true once it has finished (and has posted
//! whatever it resumes), and is then dropped from the loop's list. Awaiters are pollers through
//! tpipe::polled_awaiter (tpipe/async/polled_awaiter.hpp).
class poller {
public:
    virtual bool poll() noexcept = 0;

protected:
    ~poller() = default;

private:
    friend class loop;
    poller* next_ = nullptr;
};

class loop {
public:
    struct options {
        //! Idle spin before sleeping while the loop is held (work of a running iteration is
        //! expected soon, e.g. a payload from a neighbour).
        std::chrono::nanoseconds spin{std::chrono::microseconds(50)};
        //! Idle spin before sleeping while nobody holds the loop (between iterations).
        std::chrono::nanoseconds cold_spin{std::chrono::microseconds(50)};
    };

    loop() = default;
    explicit loop(options o) : opts_(o) {}
    loop(const loop&) = delete;
    loop& operator=(const loop&) = delete;
    //! Waits until no other thread is still inside post() on this loop (a poster publishes its
    //! node, then checks whether to wake the loop; the loop may have run the node and be on
    //! its way out by then).
    ~loop()
    {
        while (posters_.load(std::memory_order_acquire) != 0) detail::cpu_relax();
    }

    //! The loop that is being driven on this thread, or nullptr.
    static loop* current() noexcept { return current_; }

    //! Schedules n->handle to be resumed on this loop. Callable from any thread; never blocks,
    //! never allocates. The node must stay alive until the handle is resumed.
    void post(wake_node* n) noexcept
    {
        if (current_ == this) {
            push_local(n);
            return;
        }
        posters_.fetch_add(1, std::memory_order_relaxed);
        wake_node* head = remote_.load(std::memory_order_relaxed);
        do n->next = head;
        while (!remote_.compare_exchange_weak(head, n, std::memory_order_seq_cst, std::memory_order_relaxed));
        // Only the first poster that finds the loop asleep pays for the wake-up.
        if (sleeping_.load(std::memory_order_seq_cst) && sleeping_.exchange(false, std::memory_order_seq_cst)) wake();
        posters_.fetch_sub(1, std::memory_order_release);
    }

    //! Marks work in flight on this loop (any thread): while held, an idle loop spins for
    //! options::spin before sleeping, otherwise for options::cold_spin. Wakes the loop if it
    //! sleeps and would spin while held, so that it is spinning when the work arrives.
    void hold() noexcept
    {
        holds_.fetch_add(1, std::memory_order_seq_cst);
        if (opts_.spin.count() > 0 && sleeping_.load(std::memory_order_seq_cst) &&
            sleeping_.exchange(false, std::memory_order_seq_cst))
            wake();
    }
    void release() noexcept { holds_.fetch_sub(1, std::memory_order_relaxed); }

    //! Adds a poller; only from this loop's own thread.
    void add_poller(poller* p) noexcept
    {
        p->next_ = pollers_;
        pollers_ = p;
    }

    //! Awaitable that moves the awaiting coroutine onto this loop.
    auto schedule() noexcept
    {
        struct awaiter {
            loop* l;
            wake_node node{};
            bool await_ready() const noexcept { return current_ == l; }
            void await_suspend(std::coroutine_handle<> h) noexcept
            {
                node.handle = h;
                l->post(&node);
            }
            void await_resume() const noexcept {}
        };
        return awaiter{this, {}};
    }

    //! Awaitable that lets the other ready coroutines of this loop run first (loop thread only):
    //! the awaiting coroutine goes to the back of the local queue.
    auto yield() noexcept
    {
        struct awaiter {
            loop* l;
            wake_node node{};
            bool await_ready() const noexcept { return false; }
            void await_suspend(std::coroutine_handle<> h) noexcept
            {
                node.handle = h;
                l->push_local(&node);
            }
            void await_resume() const noexcept {}
        };
        return awaiter{this, {}};
    }

    //! Drives the loop on the calling thread until stop() returns true. stop is checked after
    //! each batch of work and before sleeping; whoever makes it true from another thread must
    //! call wake() afterwards.
    template <class Stop>
    void drive(Stop&& stop)
    {
        loop* const previous = std::exchange(current_, this);
        struct restore {
            loop* p;
            ~restore() { current_ = p; }
        } r{previous};
        while (!stop()) {
            if (run_ready()) continue;
            if (pollers_) {
                poll_all();
                if (!local_head_ && !remote_.load(std::memory_order_relaxed)) detail::cpu_relax();
                continue;
            }
            if (spin_for_work(stop)) continue;
            const std::uint32_t seen = epoch_.load(std::memory_order_seq_cst);
            sleeping_.store(true, std::memory_order_seq_cst);
            if (remote_.load(std::memory_order_seq_cst) == nullptr && !stop()) epoch_.wait(seen, std::memory_order_seq_cst);
            sleeping_.store(false, std::memory_order_relaxed);
        }
    }

    //! Wakes the loop if it sleeps (any thread).
    void wake() noexcept
    {
        epoch_.fetch_add(1, std::memory_order_seq_cst);
        epoch_.notify_one();
    }

    //! Whether a coroutine waits to be resumed on this loop. Loop thread only.
    bool has_ready() const noexcept
    {
        return local_head_ != nullptr || remote_.load(std::memory_order_relaxed) != nullptr;
    }

    //! Resumes everything that is ready now; returns whether anything ran. Loop thread only.
    bool run_ready()
    {
        take_remote();
        if (!local_head_) return false;
        while (local_head_) {
            wake_node* n = local_head_;
            local_head_ = n->next;
            if (!local_head_) local_tail_ = nullptr;
            std::coroutine_handle<> h = n->handle;  // n may be reused once h runs
            h.resume();
            take_remote();
        }
        return true;
    }

private:
    void push_local(wake_node* n) noexcept
    {
        n->next = nullptr;
        if (local_tail_) local_tail_->next = n;
        else local_head_ = n;
        local_tail_ = n;
    }

    void take_remote() noexcept
    {
        if (!remote_.load(std::memory_order_relaxed)) return;
        wake_node* stack = remote_.exchange(nullptr, std::memory_order_acquire);
        // The stack is newest-first; reverse it to resume in posting order.
        wake_node* fifo = nullptr;
        while (stack) {
            wake_node* next = stack->next;
            stack->next = fifo;
            fifo = stack;
            stack = next;
        }
        while (fifo) {
            wake_node* next = fifo->next;
            push_local(fifo);
            fifo = next;
        }
    }

    void poll_all() noexcept
    {
        poller** link = &pollers_;
        while (*link) {
            poller* p = *link;
            if (p->poll()) *link = p->next_;
            else link = &p->next_;
        }
    }

    //! Spins until work arrives or the spin budget is spent: pause instructions for the first
    //! 20 us, then sched_yield, so that a thread sharing this core (another loop, the caller of
    //! tpipe::run, another process) is not kept off it by a long spin.
    template <class Stop>
    bool spin_for_work(Stop& stop)
    {
        const auto spin = holds_.load(std::memory_order_relaxed) > 0 ? opts_.spin : opts_.cold_spin;
        if (spin.count() <= 0) return false;
        constexpr auto pause_phase = std::chrono::microseconds(20);
        const auto start = std::chrono::steady_clock::now();
        bool yielding = false;
        for (unsigned i = 1;; ++i) {
            if (remote_.load(std::memory_order_relaxed) != nullptr) return true;
            if (yielding) std::this_thread::yield();
            else detail::cpu_relax();
            if (yielding || (i & 63u) == 0) {
                if (stop()) return true;
                const auto waited = std::chrono::steady_clock::now() - start;
                if (waited >= spin) return false;
                // Released meanwhile (the iteration ended): fall back to the short spin.
                if (waited >= opts_.cold_spin && holds_.load(std::memory_order_relaxed) == 0) return false;
                yielding = waited >= pause_phase;
            }
        }
    }

    static inline thread_local loop* current_ = nullptr;

    options opts_{};
    wake_node* local_head_ = nullptr;
    wake_node* local_tail_ = nullptr;
    poller* pollers_ = nullptr;
    alignas(64) std::atomic<wake_node*> remote_{nullptr};
    std::atomic<int> posters_{0};  //!< threads inside post() (same cache line as remote_)
    std::atomic<int> holds_{0};
    alignas(64) std::atomic<bool> sleeping_{false};
    std::atomic<std::uint32_t> epoch_{0};
};

//! A loop with its own thread, driven until the loop_thread is destroyed.
class loop_thread {
public:
    explicit loop_thread(loop::options o = {}) : loop_(o), thread_([this] { loop_.drive([this] { return stop_.load(std::memory_order_acquire); }); }) {}
    loop_thread(const loop_thread&) = delete;
    loop_thread& operator=(const loop_thread&) = delete;
    ~loop_thread()
    {
        stop_.store(true, std::memory_order_release);
        loop_.wake();
        thread_.join();
    }
    tpipe::loop& get() noexcept { return loop_; }

private:
    tpipe::loop loop_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

} // namespace tpipe
