#pragma once
// tpipe::on_stop<F>: runs F once the std::stop_token it watches is stopped. The cancellation of
// an iteration is one std::stop_source (tpipe::run owns it) whose token every channel, engine,
// communicator and backward_hook receives when the iteration starts (their reset). A model whose
// waits are polled only reads stop_requested(); one whose waiters sleep until somebody posts
// them (a local_channel's slots, a thread_communicator's rendezvous, a GPU host function) needs
// somebody to wake them, and watches the token with this.
#include <optional>
#include <stop_token>
#include <utility>

namespace tpipe {

//! F: a nothrow call that points at no object that moves. The registration is held in place
//! (no allocation per watch); moving an on_stop registers the call again on the new object,
//! so a movable model (a communicator's member handle) may hold one.
template <class F>
class on_stop {
public:
    on_stop() = default;
    on_stop(on_stop&& o) noexcept { take(o); }
    on_stop& operator=(on_stop&& o) noexcept
    {
        if (this != &o) {
            unwatch();
            take(o);
        }
        return *this;
    }
    ~on_stop() = default;

    //! Runs f once `t` is stopped (at once, on this thread, if it is already), and no longer
    //! the call watched before. Call unwatch() first when the model must clear its cancellation
    //! between the two tokens.
    void watch(std::stop_token t, F f) noexcept
    {
        unwatch();
        if (!t.stop_possible()) return;
        token_ = std::move(t);
        f_ = f;
        cb_.emplace(token_, std::move(f));
    }

    //! Watches no token: nothing is run any more, and a run on another thread has finished.
    void unwatch() noexcept
    {
        cb_.reset();
        token_ = {};
    }

private:
    void take(on_stop& o) noexcept
    {
        if (!o.cb_) return;
        // A stop_callback neither moves nor tells its token or callable: both are kept beside it.
        std::stop_token t = o.token_;
        F f = o.f_;
        o.unwatch();
        watch(std::move(t), std::move(f));
    }

    std::stop_token token_;
    F f_{};
    std::optional<std::stop_callback<F>> cb_;
};

} // namespace tpipe
