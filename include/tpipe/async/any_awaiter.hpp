#pragma once
// detail::any_awaiter: one awaiter of void held behind three function pointers, so that the
// runner can co_await a channel's arrival or drain without knowing the channel's type (the
// transport is chosen per boundary at run time). An awaiter of up to `capacity` bytes is held in
// place (no allocation: every shipped channel's); a larger or over-aligned one, on the heap, so a
// channel model is never limited by the runner.
#include <coroutine>
#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace tpipe::detail {

class any_awaiter {
public:
    static constexpr std::size_t capacity = 96;

    any_awaiter() = default;
    any_awaiter(const any_awaiter&) = delete;
    any_awaiter& operator=(const any_awaiter&) = delete;
    ~any_awaiter() { reset(); }

    //! Builds an A from args (in place when it fits). A's await_suspend returns void or bool.
    template <class A, class... Args>
    void emplace(Args&&... args)
    {
        using suspend_result = decltype(std::declval<A&>().await_suspend(std::coroutine_handle<>{}));
        static_assert(std::is_void_v<suspend_result> || std::is_same_v<suspend_result, bool>,
                      "any_awaiter: await_suspend must return void or bool");
        constexpr bool inline_held = sizeof(A) <= capacity && alignof(A) <= alignof(std::max_align_t);
        reset();
        if constexpr (inline_held) {
            ::new (static_cast<void*>(buf_)) A(std::forward<Args>(args)...);
            p_ = buf_;
        } else {
            p_ = new A(std::forward<Args>(args)...);
        }
        static constexpr table t{
            [](void* p) { return static_cast<bool>(static_cast<A*>(p)->await_ready()); },
            [](void* p, std::coroutine_handle<> h) {
                if constexpr (std::is_void_v<suspend_result>) {
                    static_cast<A*>(p)->await_suspend(h);
                    return true;
                } else {
                    return static_cast<bool>(static_cast<A*>(p)->await_suspend(h));
                }
            },
            [](void* p) { static_cast<A*>(p)->await_resume(); },
            [](void* p) noexcept {
                if constexpr (inline_held) static_cast<A*>(p)->~A();
                else delete static_cast<A*>(p);
            },
        };
        t_ = &t;
    }

    bool await_ready() { return t_->ready(p_); }
    bool await_suspend(std::coroutine_handle<> h) { return t_->suspend(p_, h); }
    void await_resume() { t_->resume(p_); }

private:
    struct table {
        bool (*ready)(void*);
        bool (*suspend)(void*, std::coroutine_handle<>);
        void (*resume)(void*);
        void (*destroy)(void*) noexcept;
    };
    void reset() noexcept
    {
        if (t_) t_->destroy(p_);
        t_ = nullptr;
    }

    alignas(std::max_align_t) std::byte buf_[capacity];
    void* p_ = nullptr;  //!< buf_, or the heap
    const table* t_ = nullptr;
};

} // namespace tpipe::detail
