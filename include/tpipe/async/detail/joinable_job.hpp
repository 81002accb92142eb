#pragma once
// A task started now and joined later (async/detail/root.hpp's root keeps it alive meanwhile).
#include <coroutine>
#include <utility>

#include "tpipe/async/detail/root.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/task.hpp"

namespace tpipe::detail {

//! A task started at once on a loop (it runs until its first suspension) and joined later, from
//! that loop, by one awaiting coroutine: the runner's backward_hook work, started by the rank
//! and joined by the rank's next job or at the rank's end.
struct joinable_job {
    task<void> body;
    root running;  //!< keeps the started task alive until it completes
    loop* home = nullptr;
    wake_node joiner{};
    bool done = false;

    void start(task<void> t, loop& on)
    {
        body = std::move(t);
        home = &on;
        running = make_root<void>(body.handle());
        running.on_done(
            [](void* p) noexcept {
                auto* j = static_cast<joinable_job*>(p);
                j->done = true;
                if (j->joiner.handle) j->home->post(&j->joiner);
            },
            this);
        running.handle().resume();  // runs until its first suspension
    }
    auto join() noexcept
    {
        struct awaiter {
            joinable_job& j;
            bool await_ready() const noexcept { return j.done; }
            void await_suspend(std::coroutine_handle<> h) noexcept { j.joiner.handle = h; }
            void await_resume() const noexcept {}
        };
        return awaiter{*this};
    }
};

} // namespace tpipe::detail
