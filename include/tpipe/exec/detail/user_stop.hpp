#pragma once
// detail::user_stop<Fail>: run_options::stop during one iteration of a runner. Once the user's
// token is stopped, Fail (the runner's failure path) gets a tpipe::stopped_error, on the thread
// that requested the stop. The error is made before the iteration, so that callback allocates
// nothing.
#include <exception>
#include <stop_token>
#include <utility>

#include "tpipe/async/on_stop.hpp"
#include "tpipe/exec/errors.hpp"

namespace tpipe::detail {

//! Fail: `void(const std::exception_ptr&) noexcept`.
template <class Fail>
class user_stop {
public:
    //! Watches `stop` for the iteration about to start (a default token: nothing to watch).
    void watch(const std::stop_token& stop, Fail fail)
    {
        if (!stop.stop_possible()) return;
        error_ = std::make_exception_ptr(stopped_error(
            "run: run_options::stop was requested, so the iteration was abandoned on every rank; its outputs and "
            "gradients are incomplete (do not step the optimizer on them)"));
        on_stop_.watch(stop, call{std::move(fail), error_});
    }

    //! The error of a stopped iteration (null when no token is watched).
    const std::exception_ptr& error() const noexcept { return error_; }
    //! Stops watching: a stop requested from now on is the next iteration's.
    void end() noexcept { on_stop_.unwatch(); }

private:
    struct call {
        Fail fail{};
        std::exception_ptr error{};
        void operator()() const noexcept { fail(error); }
    };
    std::exception_ptr error_;
    on_stop<call> on_stop_;
};

} // namespace tpipe::detail
