#pragma once
// detail::boundary<T, X>: everything at the output of one stage (T = its output type): the
// payloads waiting to be sent or consumed on this process, and the two channels to the next
// stage (activations forward, gradients backward), each local, from transport X, or none. A
// boundary with one end in another process gets X's channel (connect); one with both ends here
// gets a local channel, or, from a tpipe::link_transport that joins them by a link
// (open_within: a copy between two GPUs of this process), the linked channel over it. X's
// channel type for T is used only if X carries T (has_channel_type_for): the last stage's
// output, which never travels, needs none.
// detail::boundary_base is the type-independent face the rank coroutine awaits through.
#include <concepts>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/async/any_awaiter.hpp"
#include "tpipe/exec/detail/type_name.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/transport/link_transport.hpp"
#include "tpipe/transport/local_channel.hpp"
#include "tpipe/transport/transport.hpp"

namespace tpipe::detail {

template <class T>
T take_optional(std::optional<T>& o)
{
    T v = std::move(*o);
    o.reset();
    return v;
}

//! One direction of a boundary: a local channel, a channel of the transport, or none (neither
//! end runs here, or both stages are on one rank).
template <payload T, channel Remote>
class link {
public:
    void connect_local()
    {
        remote_.reset();
        local_.emplace();
    }
    void connect_remote(std::unique_ptr<Remote> r)
    {
        local_.reset();
        remote_ = std::move(r);
    }
    bool remote() const noexcept { return remote_ != nullptr; }

    void send(int tag, T&& v)
    {
        if (remote_) remote_->send(tag, std::move(v));
        else local().send(tag, std::move(v));
    }
    void post(int tag)
    {
        if (remote_) remote_->post(tag);
    }
    bool ready(int tag) const noexcept
    {
        if (remote_) return remote_->ready(tag);
        return local_ && local_->ready(tag);
    }
    T take(int tag) { return remote_ ? remote_->take(tag) : local().take(tag); }
    void arrival(any_awaiter& a, int tag)
    {
        if (!remote_) a.emplace<slot_wait>(local().arrival(tag));
        else a.emplace<decltype(remote_->arrival(tag))>(remote_->arrival(tag));
    }
    void drain(any_awaiter& a)
    {
        if (!remote_) a.emplace<std::suspend_never>();
        else a.emplace<decltype(remote_->drain())>(remote_->drain());
    }
    void reset(int tags, bool clear, const std::stop_token& stop)
    {
        if (remote_) remote_->reset(tags, stop);
        if (!local_) return;
        if (clear) local_->clear();
        local_->reset(tags, stop);
    }

private:
    local_channel<T>& local()
    {
        if (!local_) throw error("runtime: a payload crossed a stage boundary that has no channel on this process");
        return *local_;
    }
    std::optional<local_channel<T>> local_;
    std::unique_ptr<Remote> remote_;
};

//! How a boundary's two ranks relate to this process.
enum class boundary_ends { none, same_rank, both_here, sender_here, receiver_here };

class boundary_base {
public:
    virtual ~boundary_base() = default;
    //! Starts an iteration of `units` units, cancelled once `stop` is stopped; `clear` also
    //! destroys payloads left behind.
    virtual void reset(int units, bool clear, const std::stop_token& stop) = 0;
    //! Receiving end of the forward (activations) or backward (gradients) direction.
    virtual void post(bool forward, int tag) = 0;
    virtual void arrival(any_awaiter& a, bool forward, int tag) = 0;
    //! Sending end: completes once every payload sent this iteration was released.
    virtual void drain(any_awaiter& a, bool forward) = 0;
    virtual bool remote(bool forward) const noexcept = 0;
};

//! The channel type of a boundary of T that a transport cannot carry: never connected, so
//! never called (boundary::connect refuses the boundaries that would need it).
template <payload T>
struct no_channel {
    using value_type = T;
    [[noreturn]] static void unreachable() { throw error("runtime: a boundary without a channel was used"); }
    void send(int, T&&) { unreachable(); }
    void post(int) { unreachable(); }
    std::suspend_never arrival(int) { unreachable(); }
    bool ready(int) const noexcept { return false; }
    T take(int) { unreachable(); }
    std::suspend_never drain() { unreachable(); }
    void reset(int, std::stop_token) noexcept {}
};

template <class X, class T>
struct remote_channel_of {
    using type = no_channel<T>;
};
template <class X, class T>
    requires has_channel_type_for<X, T>
struct remote_channel_of<X, T> {
    using type = typename X::template channel_type<T>;
};

template <payload T, transport X>
class boundary final : public boundary_base {
public:
    using remote_channel = typename remote_channel_of<X, T>::type;
    static_assert(check_transport_for<X, T>());

    std::vector<std::optional<T>> act_out;   //!< forward output not yet sent or consumed
    std::vector<std::optional<T>> grad_out;  //!< next stage's input gradient not yet sent or consumed
    std::vector<std::optional<T>> seed;      //!< last stage only: loss gradient per unit
    link<T, remote_channel> fwd;             //!< activations to the next stage
    link<T, remote_channel> bwd;             //!< gradients from the next stage

    //! Connects both directions of boundary `index` (stage index to stage index + 1, on ranks
    //! `from` and `to`) for `units` units. Refuses a boundary that needs a channel of the
    //! transport when the transport cannot carry T.
    void connect(X& x, boundary_ends ends, int index, int from, int to, int units)
    {
        switch (ends) {
        case boundary_ends::none:
        case boundary_ends::same_rank: break;
        case boundary_ends::both_here:
            if constexpr (std::derived_from<X, link_transport>) {
                connect_within(x, index, from, to, units);
            } else {
                fwd.connect_local();
                bwd.connect_local();
            }
            break;
        case boundary_ends::sender_here:
        case boundary_ends::receiver_here: {
            if constexpr (transport_for<X, T>) {
                const bool here_first = ends == boundary_ends::sender_here;  // stage `index` runs here
                fwd.connect_remote(x.template connect<T>(endpoint{index, true, from, to, here_first, units}));
                bwd.connect_remote(x.template connect<T>(endpoint{index, false, to, from, !here_first, units}));
            } else {
                refuse(index, "between ranks " + std::to_string(from) + " and " + std::to_string(to) +
                                  ", which run in different processes");
            }
            break;
        }
        }
        reset(units, true, {});
    }

    void reset(int units, bool clear, const std::stop_token& stop) override
    {
        fwd.reset(units, clear, stop);
        bwd.reset(units, clear, stop);
        if (!clear) return;
        for (auto* v : {&act_out, &grad_out, &seed}) {
            v->clear();  // keeps the capacity: no allocation after the first iteration
            v->resize(static_cast<std::size_t>(units));
        }
    }
    void post(bool forward, int tag) override { (forward ? fwd : bwd).post(tag); }
    void arrival(any_awaiter& a, bool forward, int tag) override { (forward ? fwd : bwd).arrival(a, tag); }
    void drain(any_awaiter& a, bool forward) override { (forward ? fwd : bwd).drain(a); }
    bool remote(bool forward) const noexcept override { return (forward ? fwd : bwd).remote(); }

private:
    //! Both ranks run here: over the links that x joins them with, or local channels.
    void connect_within(link_transport& x, int index, int from, int to, int units)
    {
        std::unique_ptr<tpipe::link> forward = x.open_within(endpoint{index, true, from, to, true, units});
        if (!forward) {
            fwd.connect_local();
            bwd.connect_local();
            return;
        }
        if constexpr (transport_for<X, T>) {
            fwd.connect_remote(std::make_unique<remote_channel>(std::move(forward), channel_end::both, units));
            bwd.connect_remote(std::make_unique<remote_channel>(x.open_within(endpoint{index, false, to, from, true, units}),
                                                                channel_end::both, units));
        } else {
            refuse(index, "between ranks " + std::to_string(from) + " and " + std::to_string(to) +
                              " of this process, which the transport joins by a link");
        }
    }

    [[noreturn]] static void refuse(int index, const std::string& where)
    {
        throw invalid_argument("runner: the output of stage " + std::to_string(index) + " (" + portable_type_name<T>() +
                               ") crosses a boundary " + where + ", but the transport has no channel for that type; give "
                               "the type the form the transport sends (tpipe::payload_traits for MPI, "
                               "tpipe::device_payload_traits for NCCL and GPU peer copies)");
    }
};

} // namespace tpipe::detail
