#pragma once
// tpipe::any_channel<T>: a channel of T whose model is chosen at run time, one virtual call per
// operation. It lets the boundaries of one payload type get channels of different types, e.g.
// GPU peer copies inside a process and NCCL between processes (tpipe::composed_transport,
// tpipe/transport/composed_transport.hpp). tpipe::erase_channel(std::unique_ptr<C>) wraps a channel C.
//
// arrival() and drain() build the model's awaiter in place in a detail::any_awaiter (no
// allocation); the runner asks for them through arrival_into() and drain_into(), so that an
// erased channel is not erased twice.
#include <coroutine>
#include <memory>
#include <stop_token>
#include <utility>

#include "tpipe/transport/channel.hpp"
#include "tpipe/async/any_awaiter.hpp"

namespace tpipe {

template <payload T>
class any_channel {
public:
    using value_type = T;

    //! An awaiter of the model's arrival or drain, built in place when returned.
    class erased_wait {
    public:
        bool await_ready() { return a_.await_ready(); }
        bool await_suspend(std::coroutine_handle<> h) { return a_.await_suspend(h); }
        void await_resume() { a_.await_resume(); }

    private:
        friend class any_channel;
        erased_wait(any_channel& c, int tag, bool arrival)
        {
            if (arrival) c.arrival_into(a_, tag);
            else c.drain_into(a_);
        }
        detail::any_awaiter a_;
    };

    virtual ~any_channel() = default;

    virtual void send(int tag, T&& value) = 0;
    virtual void post(int tag) = 0;
    virtual bool ready(int tag) const noexcept = 0;
    virtual T take(int tag) = 0;
    virtual void reset(int tags, std::stop_token stop = {}) = 0;
    //! The model's arrival(tag) and drain() awaiters, built in `into`.
    virtual void arrival_into(detail::any_awaiter& into, int tag) = 0;
    virtual void drain_into(detail::any_awaiter& into) = 0;

    erased_wait arrival(int tag) { return erased_wait(*this, tag, true); }
    erased_wait drain() { return erased_wait(*this, 0, false); }
};

namespace detail {
template <channel C>
class channel_model final : public any_channel<typename C::value_type> {
public:
    using T = typename C::value_type;
    explicit channel_model(std::unique_ptr<C> c) : c_(std::move(c)) {}

    void send(int tag, T&& value) override { c_->send(tag, std::move(value)); }
    void post(int tag) override { c_->post(tag); }
    bool ready(int tag) const noexcept override { return c_->ready(tag); }
    T take(int tag) override { return c_->take(tag); }
    void reset(int tags, std::stop_token stop) override { c_->reset(tags, std::move(stop)); }
    void arrival_into(any_awaiter& into, int tag) override { into.emplace<decltype(c_->arrival(tag))>(c_->arrival(tag)); }
    void drain_into(any_awaiter& into) override { into.emplace<decltype(c_->drain())>(c_->drain()); }

private:
    std::unique_ptr<C> c_;
};

template <class C>
inline constexpr bool is_any_channel = false;
template <class T>
inline constexpr bool is_any_channel<any_channel<T>> = true;
} // namespace detail

//! `c` behind an any_channel of its value type (an any_channel is returned as it is).
template <channel C>
std::unique_ptr<any_channel<typename C::value_type>> erase_channel(std::unique_ptr<C> c)
{
    if constexpr (detail::is_any_channel<C>) return c;
    else return std::make_unique<detail::channel_model<C>>(std::move(c));
}

static_assert(channel<any_channel<int>>);

} // namespace tpipe
