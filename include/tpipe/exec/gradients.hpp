#pragma once
// What a stage exposes for data parallelism: gradients() returns where its parameter gradients
// are, as one std::span<float> / std::span<double> or a range of them. tpipe::data_parallel
// all-reduces them across the stage's replicas after the stage's last backward of an iteration;
// the spans must stay valid (and the stage must not touch them) until tpipe::run returns.
//
//   struct my_stage {
//     ...
//     std::vector<std::span<float>> gradients() { return {w_grad, b_grad}; }
//   };
#include <concepts>
#include <ranges>
#include <span>
#include <type_traits>
#include <vector>

#include "tpipe/exec/stage.hpp"

namespace tpipe {

namespace detail {
template <class G>
concept gradient_span = std::same_as<std::remove_cvref_t<G>, std::span<float>> ||
                        std::same_as<std::remove_cvref_t<G>, std::span<double>>;
} // namespace detail

//! A stage whose gradients() returns a std::span<float|double> or a range of them.
template <class S>
concept exposes_gradients = requires(stage_object_t<S>& s) { s.gradients(); } &&
                            (detail::gradient_span<decltype(std::declval<stage_object_t<S>&>().gradients())> ||
                             (std::ranges::range<decltype(std::declval<stage_object_t<S>&>().gradients())> &&
                              detail::gradient_span<std::ranges::range_value_t<
                                  decltype(std::declval<stage_object_t<S>&>().gradients())>>));

//! A stage with a member named gradients, whatever it returns: it means to expose its gradients
//! (a near miss of exposes_gradients is an error, never a stage silently left out of the
//! all-reduce, whose replicas would then drift apart).
template <class S>
concept names_gradients = requires { &stage_object_t<S>::gradients; } || requires(stage_object_t<S>& s) { s.gradients(); };

namespace detail {
//! True; a compile error naming the member when S has a gradients() that exposes_gradients refuses.
template <class S>
consteval bool check_gradients()
{
    if constexpr (names_gradients<S>)
        static_assert(exposes_gradients<S>,
                      "this stage (S above) has a member `gradients`, so it must be `gradients()` returning "
                      "std::span<float>, std::span<double> or a range of them (tpipe/exec/gradients.hpp); as it is, "
                      "tpipe::data_parallel could not all-reduce its gradients and the replicas would drift apart");
    return true;
}
} // namespace detail

//! A stage's gradients, by element type.
struct gradient_view {
    std::vector<std::span<float>> f32;
    std::vector<std::span<double>> f64;
};

//! The gradients of stage s, as a gradient_view.
template <class S>
    requires exposes_gradients<S>
gradient_view gradients_of(S& s)
{
    gradient_view v;
    auto add = [&](auto span) {
        if constexpr (std::is_same_v<decltype(span), std::span<float>>) v.f32.push_back(span);
        else v.f64.push_back(span);
    };
    auto&& g = s.gradients();
    if constexpr (detail::gradient_span<decltype(g)>) add(g);
    else
        for (auto span : g) add(span);
    return v;
}

} // namespace tpipe
