#pragma once
// tpipe::task<T>: a lazy coroutine. It starts when awaited, hands control back to its awaiter
// by symmetric transfer (no stack growth on long chains), and delivers a value or the
// exception that escaped it.
//
// Semantics: `co_await t` starts t on the awaiting thread; when t finishes, the awaiter
// resumes on the thread that finished t. Every awaitable of tpipe that suspends (channel
// receives, loop::schedule, engine completions) resumes its coroutine on the loop that was
// current when it suspended, so a task and everything it awaits stay on their device's loop.
// Errors: an exception escaping the body is stored and rethrown by `co_await`.
// Cancellation: destroying a task destroys its suspended frame (and the frames of the tasks it
// is awaiting); only do that when nothing can resume it any more.
#include <coroutine>
#include <exception>
#include <type_traits>
#include <utility>
#include <variant>

namespace tpipe {

template <class T = void>
class task;

namespace detail {

class task_promise_base {
public:
    struct final_awaiter {
        bool await_ready() const noexcept { return false; }
        template <class P>
        std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) const noexcept
        {
            return h.promise().continuation_;
        }
        void await_resume() const noexcept {}
    };

    std::suspend_always initial_suspend() const noexcept { return {}; }
    final_awaiter final_suspend() const noexcept { return {}; }
    void set_continuation(std::coroutine_handle<> c) noexcept { continuation_ = c; }

private:
    std::coroutine_handle<> continuation_ = std::noop_coroutine();
};

template <class T>
class task_promise : public task_promise_base {
public:
    task<T> get_return_object() noexcept;
    void unhandled_exception() noexcept { result_.template emplace<2>(std::current_exception()); }
    template <class U>
        requires std::convertible_to<U&&, T>
    void return_value(U&& v) noexcept(std::is_nothrow_constructible_v<T, U&&>)
    {
        result_.template emplace<1>(std::forward<U>(v));
    }
    bool result_failed() const noexcept { return result_.index() == 2; }
    T result()
    {
        if (result_.index() == 2) std::rethrow_exception(std::get<2>(result_));
        return std::move(std::get<1>(result_));
    }

private:
    std::variant<std::monostate, T, std::exception_ptr> result_;
};

template <class T>
class task_promise<T&> : public task_promise_base {
public:
    task<T&> get_return_object() noexcept;
    void unhandled_exception() noexcept { result_.template emplace<2>(std::current_exception()); }
    void return_value(T& v) noexcept { result_.template emplace<1>(std::addressof(v)); }
    bool result_failed() const noexcept { return result_.index() == 2; }
    T& result()
    {
        if (result_.index() == 2) std::rethrow_exception(std::get<2>(result_));
        return *std::get<1>(result_);
    }

private:
    std::variant<std::monostate, T*, std::exception_ptr> result_;
};

template <>
class task_promise<void> : public task_promise_base {
public:
    task<void> get_return_object() noexcept;
    void unhandled_exception() noexcept { error_ = std::current_exception(); }
    void return_void() noexcept {}
    bool result_failed() const noexcept { return static_cast<bool>(error_); }
    void result()
    {
        if (error_) std::rethrow_exception(error_);
    }

private:
    std::exception_ptr error_;
};

} // namespace detail

//! A lazy coroutine producing a T (or void, or a reference).
//! Example:
//!   tpipe::task<int> answer() { co_return 42; }
//!   tpipe::task<int> twice() { co_return 2 * co_await answer(); }
template <class T>
class [[nodiscard]] task {
public:
    using promise_type = detail::task_promise<T>;
    using handle_type = std::coroutine_handle<promise_type>;
    using value_type = T;

    task() noexcept = default;
    explicit task(handle_type h) noexcept : h_(h) {}
    task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
    task& operator=(task&& o) noexcept
    {
        if (this != &o) {
            if (h_) h_.destroy();
            h_ = std::exchange(o.h_, {});
        }
        return *this;
    }
    task(const task&) = delete;
    task& operator=(const task&) = delete;
    ~task()
    {
        if (h_) h_.destroy();
    }

    //! True when the task holds a coroutine (it was not moved from).
    bool valid() const noexcept { return static_cast<bool>(h_); }
    //! True when the coroutine ran to its end (value or exception stored).
    bool done() const noexcept { return h_ && h_.done(); }
    handle_type handle() const noexcept { return h_; }

    struct awaiter {
        handle_type h;
        bool await_ready() const noexcept { return !h || h.done(); }
        std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept
        {
            h.promise().set_continuation(awaiting);
            return h;
        }
        decltype(auto) await_resume() { return h.promise().result(); }
    };
    //! Starts the task (if not started) and resumes the awaiter with its result.
    awaiter operator co_await() && noexcept { return awaiter{h_}; }
    awaiter operator co_await() & noexcept { return awaiter{h_}; }

    //! The result of a finished task: its value, or rethrows its exception.
    decltype(auto) result() { return h_.promise().result(); }

private:
    handle_type h_{};
};

namespace detail {
template <class T>
task<T> task_promise<T>::get_return_object() noexcept
{
    return task<T>{std::coroutine_handle<task_promise<T>>::from_promise(*this)};
}
template <class T>
task<T&> task_promise<T&>::get_return_object() noexcept
{
    return task<T&>{std::coroutine_handle<task_promise<T&>>::from_promise(*this)};
}
inline task<void> task_promise<void>::get_return_object() noexcept
{
    return task<void>{std::coroutine_handle<task_promise<void>>::from_promise(*this)};
}
} // namespace detail

} // namespace tpipe
