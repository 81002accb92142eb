#pragma once
// detail::root: a coroutine that starts a task and, when the task has finished, calls a
// completion function on the thread that finished it. The task keeps its own result (value or
// exception), read afterwards with task::result(). The root stays suspended at its end; its
// owner destroys it.
#include <coroutine>
#include <exception>
#include <utility>

#include "tpipe/async/loop.hpp"
#include "tpipe/async/task.hpp"

namespace tpipe::detail {

//! Awaiting this starts the task and resumes the awaiter when it ends, without reading the
//! task's result (so the result stays in the task).
template <class T>
struct join_awaiter {
    std::coroutine_handle<task_promise<T>> h;
    bool await_ready() const noexcept { return !h || h.done(); }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept
    {
        h.promise().set_continuation(awaiting);
        return h;
    }
    void await_resume() const noexcept {}
};

class root {
public:
    using done_fn = void (*)(void*) noexcept;

    struct promise_type {
        done_fn on_done = nullptr;
        void* context = nullptr;

        root get_return_object() noexcept { return root{std::coroutine_handle<promise_type>::from_promise(*this)}; }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        auto final_suspend() const noexcept
        {
            struct awaiter {
                bool await_ready() const noexcept { return false; }
                void await_suspend(std::coroutine_handle<promise_type> h) const noexcept
                {
                    auto& p = h.promise();
                    if (p.on_done) p.on_done(p.context);  // may let the owner destroy us: touch nothing after
                }
                void await_resume() const noexcept {}
            };
            return awaiter{};
        }
        void return_void() const noexcept {}
        [[noreturn]] void unhandled_exception() const noexcept { std::terminate(); }  // join_awaiter never throws
    };

    root() noexcept = default;
    explicit root(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
    root(root&& o) noexcept : h_(std::exchange(o.h_, {})) {}
    root& operator=(root&& o) noexcept
    {
        if (this != &o) {
            if (h_) h_.destroy();
            h_ = std::exchange(o.h_, {});
        }
        return *this;
    }
    ~root()
    {
        if (h_) h_.destroy();
    }

    void on_done(done_fn f, void* ctx) noexcept
    {
        h_.promise().on_done = f;
        h_.promise().context = ctx;
    }
    std::coroutine_handle<> handle() const noexcept { return h_; }
    bool done() const noexcept { return h_ && h_.done(); }

private:
    std::coroutine_handle<promise_type> h_{};
};

//! A root for task h. With a loop `home`, the root hops back to `home` after the task ends, so
//! the completion function runs on home's thread.
template <class T>
root make_root(std::coroutine_handle<task_promise<T>> h, loop* home = nullptr)
{
    co_await join_awaiter<T>{h};
    if (home) co_await home->schedule();
}

} // namespace tpipe::detail
