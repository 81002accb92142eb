#pragma once
// The stage concept: what user code must provide so that tpipe can run it as one stage of a
// pipeline. A stage is any type with
//
//   struct my_stage {
//     using input  = X;                                  // payload received from the previous stage
//     using output = Y;                                  // payload sent to the next stage
//     Y forward(const tpipe::unit& u, X in);             // tokens [t0,t1) of microbatch u.microbatch
//     X backward(const tpipe::unit& u, Y grad_out);      // gradient with respect to `in`
//     // optional zero-bubble split (both or neither):
//     X    backward_input(const tpipe::unit& u, Y grad_out);
//     void backward_weight(const tpipe::unit& u);
//   };
//
// Contract the runtime gives every stage (see docs/runtime.md, "Stages"):
// - All calls on one stage object come from one thread (the loop of the device the stage is
//   placed on), never concurrently.
// - forward of slice k of a microbatch runs after forward of slices 0..k-1 of that microbatch;
//   backward (or backward_input) runs in reverse slice order; backward_weight(u) runs after
//   backward_input(u). (The schedule's validated order provides this; the runtime executes it.)
// - The first stage's input for unit u comes from the user's `source(u)` callable passed to
//   tpipe::run; the last stage's output is handed to the user's `output_grad(u, out)` callable, whose
//   return value (the gradient of the loss with respect to `out`) is passed to the last stage's
//   backward. Without an `output_grad` callable the output is dropped and backward receives `Y{}`
//   (a stage that computes its own loss in forward). The first stage's input gradient goes to
//   the optional `input_grad(u, dx)` callable, or is dropped.
// - Schedules with split backward (zb-h1, zb-v) call backward_input then backward_weight. A
//   stage without the split falls back: its I action calls backward() and its W action does
//   nothing, so gradients stay exact and only the zero-bubble overlap is lost. The split is both
//   or neither: a stage with one of the two members (or either with another signature) does not
//   compile in a pipeline (detail::check_split_backward names the member).
#include <concepts>
#include <functional>
#include <type_traits>

#include "tpipe/core/unit.hpp"
#include "tpipe/transport/payload.hpp"

namespace tpipe {

namespace detail {
template <class S>
struct unwrap_stage {
    using type = S;
};
template <class S>
struct unwrap_stage<std::reference_wrapper<S>> {
    using type = S;
};
} // namespace detail

//! The stage type behind S: S itself, or T for std::reference_wrapper<T> (a stage passed by
//! std::ref is used in place instead of being copied into the pipeline).
template <class S>
using stage_object_t = typename detail::unwrap_stage<std::remove_cvref_t<S>>::type;

//! A type declares the payload types it consumes and produces.
template <class S>
concept declares_input_and_output_types = requires {
    typename stage_object_t<S>::input;
    typename stage_object_t<S>::output;
} && payload<typename stage_object_t<S>::input> && payload<typename stage_object_t<S>::output>;

template <class S>
using stage_input_t = typename stage_object_t<S>::input;
template <class S>
using stage_output_t = typename stage_object_t<S>::output;

//! forward(const unit&, input) returns output.
template <class S>
concept has_forward_from_input_to_output =
    declares_input_and_output_types<S> &&
    requires(stage_object_t<S>& s, const unit& u, stage_input_t<S>&& x) {
        { s.forward(u, std::move(x)) } -> std::same_as<stage_output_t<S>>;
    };

//! backward(const unit&, output gradient) returns the input gradient.
template <class S>
concept has_backward_from_output_grad_to_input_grad =
    declares_input_and_output_types<S> &&
    requires(stage_object_t<S>& s, const unit& u, stage_output_t<S>&& g) {
        { s.backward(u, std::move(g)) } -> std::same_as<stage_input_t<S>>;
    };

//! A pipeline stage: declares `input` and `output`, and has forward and backward.
template <class S>
concept stage = has_forward_from_input_to_output<S> && has_backward_from_output_grad_to_input_grad<S>;

//! A stage that also splits its backward into an input part and a weight part (zero bubble).
template <class S>
concept split_backward_stage =
    stage<S> && requires(stage_object_t<S>& s, const unit& u, stage_output_t<S>&& g) {
        { s.backward_input(u, std::move(g)) } -> std::same_as<stage_input_t<S>>;
        s.backward_weight(u);
    };

//! A stage with a member named backward_input (backward_weight), whatever its signature: it means
//! to split its backward, so the split must be whole (both or neither, checked by the pipelines).
template <class S>
concept names_backward_input = requires { &stage_object_t<S>::backward_input; } ||
                               requires(stage_object_t<S>& s, const unit& u, stage_output_t<S>&& g) {
                                   s.backward_input(u, std::move(g));
                               };
template <class S>
concept names_backward_weight = requires { &stage_object_t<S>::backward_weight; } ||
                                requires(stage_object_t<S>& s, const unit& u) { s.backward_weight(u); };

namespace detail {
//! True; a compile error naming the member when a stage splits its backward by half (one of
//! backward_input and backward_weight, or either with another signature). Without the check such
//! a stage would fall back to backward() silently: zero-bubble schedules would lose their overlap,
//! and a stage whose backward() leaves the weight gradients to backward_weight would lose them.
template <class S>
consteval bool check_split_backward()
{
    if constexpr (names_backward_input<S> || names_backward_weight<S>) {
        static_assert(names_backward_input<S>,
                      "tpipe: this stage (S above) has backward_weight but no member `input backward_input(const "
                      "tpipe::unit&, output)`; a split backward needs both (or neither: backward alone)");
        static_assert(names_backward_weight<S>,
                      "tpipe: this stage (S above) has backward_input but no member `void backward_weight(const "
                      "tpipe::unit&)`; a split backward needs both (or neither: backward alone)");
        if constexpr (names_backward_input<S> && names_backward_weight<S>)
            static_assert(split_backward_stage<S>,
                          "tpipe: this stage (S above) splits its backward, so it must have `input backward_input(const "
                          "tpipe::unit&, output)` and `void backward_weight(const tpipe::unit&)` with these signatures "
                          "(and be a stage: forward and backward)");
    }
    return true;
}
} // namespace detail

} // namespace tpipe
