#pragma once
// tpipe::when_all: awaits several tasks started together; resumes when all have finished.
//
// Semantics: the tasks are started one after another on the awaiting thread; each runs until
// it first suspends. The awaiter resumes on the thread that finished the last task.
// Results: when_all(task<A>, task<B>...) gives a std::tuple<A, B, ...> (std::monostate for a
// void task); when_all(std::vector<task<T>>) gives std::vector<T> (or void).
// Errors: every task runs to its end; then the exception of the first failed task (in argument
// order) is rethrown.
#include <atomic>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <tuple>
#include <type_traits>
#include <variant>
#include <vector>

#include "tpipe/async/detail/root.hpp"
#include "tpipe/async/task.hpp"

namespace tpipe {

namespace detail {

struct when_all_counter {
    std::atomic<std::size_t> remaining{0};
    std::coroutine_handle<> parent{};
};

class when_all_child {
public:
    struct promise_type {
        when_all_counter* counter = nullptr;
        when_all_child get_return_object() noexcept
        {
            return when_all_child{std::coroutine_handle<promise_type>::from_promise(*this)};
        }
        std::suspend_always initial_suspend() const noexcept { return {}; }
        auto final_suspend() const noexcept
        {
            struct awaiter {
                bool await_ready() const noexcept { return false; }
                std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) const noexcept
                {
                    when_all_counter* c = h.promise().counter;
                    if (c->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) return c->parent;
                    return std::noop_coroutine();
                }
                void await_resume() const noexcept {}
            };
            return awaiter{};
        }
        void return_void() const noexcept {}
        [[noreturn]] void unhandled_exception() const noexcept { std::terminate(); }
    };

    explicit when_all_child(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
    when_all_child(when_all_child&& o) noexcept : h_(std::exchange(o.h_, {})) {}
    when_all_child(const when_all_child&) = delete;
    when_all_child& operator=(const when_all_child&) = delete;
    when_all_child& operator=(when_all_child&&) = delete;
    ~when_all_child()
    {
        if (h_) h_.destroy();
    }
    void start(when_all_counter* c) noexcept
    {
        h_.promise().counter = c;
        h_.resume();
    }

private:
    std::coroutine_handle<promise_type> h_;
};

template <class T>
when_all_child make_when_all_child(std::coroutine_handle<task_promise<T>> h)
{
    co_await join_awaiter<T>{h};
}

//! Starts every child; resumes the awaiter when the last one ends.
struct when_all_awaiter {
    std::vector<when_all_child>& children;
    when_all_counter counter{};

    bool await_ready() const noexcept { return children.empty(); }
    bool await_suspend(std::coroutine_handle<> parent) noexcept
    {
        counter.parent = parent;
        counter.remaining.store(children.size() + 1, std::memory_order_relaxed);
        for (auto& c : children) c.start(&counter);
        // Our own share: if it was the last, every child finished synchronously; continue.
        return counter.remaining.fetch_sub(1, std::memory_order_acq_rel) != 1;
    }
    void await_resume() const noexcept {}
};

template <class T>
using when_all_value_t = std::conditional_t<std::is_void_v<T>, std::monostate, T>;

template <class T>
when_all_value_t<T> when_all_take(task<T>& t)
{
    if constexpr (std::is_void_v<T>) {
        t.result();
        return {};
    } else {
        return t.result();
    }
}

//! Reads every result in order; rethrows the first stored exception after all were looked at.
template <class F>
void rethrow_first(std::exception_ptr& first, F&& read)
{
    try {
        read();
    } catch (...) {
        if (!first) first = std::current_exception();
    }
}

} // namespace detail

//! Awaits all tasks; gives their results as a tuple (std::monostate for void tasks).
template <class... T>
task<std::tuple<detail::when_all_value_t<T>...>> when_all(task<T>... tasks)
{
    std::vector<detail::when_all_child> children;
    children.reserve(sizeof...(T));
    (children.push_back(detail::make_when_all_child<T>(tasks.handle())), ...);
    co_await detail::when_all_awaiter{children};
    std::exception_ptr first;
    (detail::rethrow_first(first, [&] {
        if (tasks.handle().promise().result_failed()) tasks.result();
    }), ...);
    if (first) std::rethrow_exception(first);
    co_return std::tuple<detail::when_all_value_t<T>...>{detail::when_all_take(tasks)...};
}

//! Awaits all tasks of a vector; gives their results in the same order.
template <class T>
task<std::conditional_t<std::is_void_v<T>, void, std::vector<T>>> when_all(std::vector<task<T>> tasks)
{
    std::vector<detail::when_all_child> children;
    children.reserve(tasks.size());
    for (auto& t : tasks) children.push_back(detail::make_when_all_child<T>(t.handle()));
    co_await detail::when_all_awaiter{children};
    std::exception_ptr first;
    for (auto& t : tasks)
        detail::rethrow_first(first, [&] { if (t.handle().promise().result_failed()) t.result(); });
    if (first) std::rethrow_exception(first);
    if constexpr (std::is_void_v<T>) {
        co_return;
    } else {
        std::vector<T> out;
        out.reserve(tasks.size());
        for (auto& t : tasks) out.push_back(t.result());
        co_return out;
    }
}

} // namespace tpipe
