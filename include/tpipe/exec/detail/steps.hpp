#pragma once
// Step compilation: what the rank coroutine needs of each action, built once per runner.
//
// Every stage gets a stage_binding: its object, its input and output boundaries and one handler
// per action kind, instantiated for its own types (stage_ops). A pipeline typed at compile time
// and one shaped at run time bind the same way, so one runner serves both; an action then costs
// one indirect call, as a switch over stage indices would.
#include <concepts>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/exec/detail/boundary.hpp"
#include "tpipe/exec/run_options.hpp"
#include "tpipe/exec/stage.hpp"
#include "tpipe/schedule/action.hpp"
#include "tpipe/schedule/program.hpp"

namespace tpipe::detail {

//! What the handlers of one iteration read: the user's io and the units.
struct iteration_frame {
    const void* io = nullptr;     //!< the run_io<In, Out> of the pipeline
    const unit* units = nullptr;  //!< by dense unit index
};

struct stage_binding;
using handler = void (*)(const stage_binding&, int u);

struct stage_binding {
    void* stage = nullptr;
    boundary_base* in = nullptr;   //!< output boundary of the previous stage (none for the first)
    boundary_base* out = nullptr;  //!< this stage's output boundary
    const iteration_frame* frame = nullptr;
    bool first = false, last = false;
    handler forward = nullptr, backward = nullptr, backward_input = nullptr, weight = nullptr, send_f = nullptr,
            send_b = nullptr;
};

[[noreturn]] inline void missing(const char* what) { throw error(std::string("runtime: ") + what); }

//! The handlers of a stage of type S (In/Out: the pipeline's input and output types).
template <class In, class Out, class S, class X, bool First, bool Last>
struct stage_ops {
    using in_t = stage_input_t<S>;
    using out_t = stage_output_t<S>;
    static_assert(!First || std::is_same_v<in_t, In>);
    static_assert(!Last || std::is_same_v<out_t, Out>);

    static const run_io<In, Out>& io(const stage_binding& b) { return *static_cast<const run_io<In, Out>*>(b.frame->io); }
    static S& object(const stage_binding& b) { return *static_cast<S*>(b.stage); }
    static const unit& unit_of(const stage_binding& b, int u) { return b.frame->units[u]; }
    static auto& in_boundary(const stage_binding& b) { return *static_cast<boundary<in_t, X>*>(b.in); }
    static auto& out_boundary(const stage_binding& b) { return *static_cast<boundary<out_t, X>*>(b.out); }

    static in_t input(const stage_binding& b, int u)
    {
        if constexpr (First) {
            return io(b).source(unit_of(b, u));
        } else {
            auto& bd = in_boundary(b);
            if (bd.fwd.ready(u)) return bd.fwd.take(u);
            if (bd.act_out[u]) return take_optional(bd.act_out[u]);
            missing("the forward input has not arrived (the program lacks a RECV_F, or stage S-1 did not run F)");
        }
    }

    static out_t output_grad(const stage_binding& b, int u)
    {
        auto& bd = out_boundary(b);
        if constexpr (Last) {
            if (!bd.seed[u]) missing("the loss gradient is not there (forward of the last stage did not run)");
            return take_optional(bd.seed[u]);
        } else {
            if (bd.bwd.ready(u)) return bd.bwd.take(u);
            if (bd.grad_out[u]) return take_optional(bd.grad_out[u]);
            missing("the output gradient has not arrived (the program lacks a RECV_B, or stage S+1 did not run B)");
        }
    }

    static void forward(const stage_binding& b, int u)
    {
        const unit& un = unit_of(b, u);
        auto& bd = out_boundary(b);
        if constexpr (Last) {
            out_t y = object(b).forward(un, input(b, u));
            if (io(b).output_grad) bd.seed[u].emplace(io(b).output_grad(un, std::move(y)));
            else if constexpr (std::default_initializable<out_t>) bd.seed[u].emplace();
        } else {
            bd.act_out[u].emplace(object(b).forward(un, input(b, u)));
        }
    }

    template <bool InputOnly>
    static void backward(const stage_binding& b, int u)
    {
        const unit& un = unit_of(b, u);
        in_t dx = [&] {
            if constexpr (InputOnly && split_backward_stage<S>) return object(b).backward_input(un, output_grad(b, u));
            else return object(b).backward(un, output_grad(b, u));
        }();
        if constexpr (First) {
            if (io(b).input_grad) io(b).input_grad(un, std::move(dx));
        } else {
            in_boundary(b).grad_out[u].emplace(std::move(dx));
        }
    }

    static void weight(const stage_binding& b, int u)
    {
        if constexpr (split_backward_stage<S>) object(b).backward_weight(unit_of(b, u));
        else (void)b, (void)u;  // fallback: the I action already ran the whole backward
    }

    static void send_f(const stage_binding& b, int u)
    {
        auto& bd = out_boundary(b);
        if (!bd.act_out[u]) missing("SEND_F before the forward that produces it");
        bd.fwd.send(u, take_optional(bd.act_out[u]));
    }

    static void send_b(const stage_binding& b, int u)
    {
        if constexpr (First) {
            (void)b, (void)u;
            missing("SEND_B from the first stage");
        } else {
            auto& bd = in_boundary(b);
            if (!bd.grad_out[u]) missing("SEND_B before the backward that produces it");
            bd.bwd.send(u, take_optional(bd.grad_out[u]));
        }
    }

    static void bind(stage_binding& b)
    {
        b.forward = &forward;
        b.backward = &backward<false>;
        b.backward_input = &backward<true>;
        b.weight = &weight;
        b.send_f = &send_f;
        b.send_b = &send_b;
    }
};

//! Binds stage object `s` (of type S) as stage `index` of `count`: picks the handlers for its
//! position. A stage can be first only if it takes the pipeline's input type, last only if it
//! makes its output type (the pipeline types guarantee it; checked here for the compiler).
template <class In, class Out, class X, class S>
void bind_stage(stage_binding& b, S& s, std::size_t index, std::size_t count)
{
    b.stage = &s;
    b.first = index == 0;
    b.last = index + 1 == count;
    constexpr bool can_first = std::is_same_v<stage_input_t<S>, In>;
    constexpr bool can_last = std::is_same_v<stage_output_t<S>, Out>;
    if (b.first && b.last) {
        if constexpr (can_first && can_last) return stage_ops<In, Out, S, X, true, true>::bind(b);
    } else if (b.first) {
        if constexpr (can_first) return stage_ops<In, Out, S, X, true, false>::bind(b);
    } else if (b.last) {
        if constexpr (can_last) return stage_ops<In, Out, S, X, false, true>::bind(b);
    } else {
        return stage_ops<In, Out, S, X, false, false>::bind(b);
    }
    throw error("runtime: stage " + std::to_string(index) + " cannot be first or last: its payload types differ from "
                "the pipeline's input or output type");
}

//! What the rank coroutine needs of an action; 32 bytes, as the steps are streamed through once
//! per iteration. The action itself stays in the program.
struct step {
    handler run = nullptr;                  //!< compute and send
    const stage_binding* stage = nullptr;
    boundary_base* waits_on = nullptr;      //!< receive: the boundary whose channel is awaited
    int u = 0;                              //!< dense unit index
    op kind = op::F;
    bool forward = true;                    //!< receive: activations (RECV_F) or gradients (RECV_B)
    bool last_backward = false;             //!< the stage's last backward action of the iteration
};
static_assert(sizeof(step) <= 32, "a step should stay within half a cache line");

//! The step of action `a` of a stage bound as `b`; refuses what the stage cannot do.
inline step compile_step(const action& a, const stage_binding& b, int u)
{
    auto refuse = [&](const char* why) { throw invalid_program("action '" + to_string(a) + "': " + why); };
    step st;
    st.kind = a.kind;
    st.u = u;
    st.stage = &b;
    switch (a.kind) {
    case op::F: st.run = b.forward; break;
    case op::B: st.run = b.backward; break;
    case op::I: st.run = b.backward_input; break;
    case op::W: st.run = b.weight; break;
    case op::SEND_F:
        if (b.last) refuse("the last stage has no next stage to send to");
        st.run = b.send_f;
        break;
    case op::SEND_B:
        if (b.first) refuse("the first stage has no previous stage to send to");
        st.run = b.send_b;
        break;
    case op::RECV_F:
        if (b.first) refuse("the first stage has no previous stage to receive from");
        st.waits_on = b.in;
        st.forward = true;
        break;
    case op::RECV_B:
        if (b.last) refuse("the last stage has no next stage to receive from");
        st.waits_on = b.out;
        st.forward = false;
        break;
    default: refuse("the runtime does not execute this kind of action");
    }
    return st;
}

} // namespace tpipe::detail
