#pragma once
// tpipe::polled_awaiter<Derived>: the base of every awaiter that completes when something outside
// the loop finishes and nobody can wake the loop for it (an MPI request, a CUDA event, an NCCL
// transfer, a GPU peer copy). The loop asks it instead, while idle. Derived gives
//
//   bool settle() noexcept;   // tries once; true once finished (done, failed or cancelled)
//   void await_resume();      // (or any result type) what finishing produced, or its error
//
// and befriends polled_awaiter<Derived>. The base gives await_ready (one settle()) and
// await_suspend: on a loop, it registers the awaiter as a poller of loop::current() and
// suspends; the loop calls settle() while idle and resumes the coroutine on itself once it
// returns true. On a plain thread (no loop), it settles here, yielding the core between tries, and
// continues without suspending. A Derived with more to do first defines its own await_ready or
// await_suspend and calls the base's. A copy or move (made before the await) starts unregistered.
#include <coroutine>
#include <thread>

#include "tpipe/async/loop.hpp"

namespace tpipe {

template <class Derived>
class polled_awaiter : private poller {
public:
    bool await_ready() { return self().settle(); }

    bool await_suspend(std::coroutine_handle<> h)
    {
        loop* l = loop::current();
        if (!l) {
            while (!self().settle()) std::this_thread::yield();
            return false;
        }
        node_.handle = h;
        home_ = l;
        l->add_poller(this);
        return true;
    }

protected:
    polled_awaiter() noexcept = default;
    polled_awaiter(const polled_awaiter&) noexcept : poller() {}
    polled_awaiter(polled_awaiter&&) noexcept : poller() {}
    polled_awaiter& operator=(const polled_awaiter&) = delete;
    polled_awaiter& operator=(polled_awaiter&&) = delete;
    ~polled_awaiter() = default;

private:
    Derived& self() noexcept { return static_cast<Derived&>(*this); }

    //! From the loop, while idle: once settled, resumes the coroutine on the loop.
    bool poll() noexcept final
    {
        if (!self().settle()) return false;
        home_->post(&node_);
        return true;
    }

    wake_node node_{};
    loop* home_ = nullptr;
};

} // namespace tpipe
