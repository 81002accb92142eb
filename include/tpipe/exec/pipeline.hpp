#pragma once
// Pipeline graphs: what tpipe::run runs. Two models of one concept, run by the same runner:
//
// - tpipe::pipeline(stage0, stage1, ...): typed at compile time, heterogeneous stages. Each
//   argument models tpipe::stage; the output type of each stage must be the input type of the
//   next.
// - tpipe::uniform_pipeline<S>: shaped at run time, any number of stages of one type S (whose
//   input and output types are the same), re-cut between iterations by building a new one
//   (PipeTransformer re-partitions while training).
//
// Placement (which device runs which stage) is runtime data given to tpipe::run, so the same
// pipeline runs on any number of devices, with one or several stages per device.
#include <cstddef>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/stage.hpp"

namespace tpipe {

namespace detail {
template <class... S>
struct adjacent_types_match : std::true_type {};
template <class A, class B, class... Rest>
struct adjacent_types_match<A, B, Rest...>
    : std::bool_constant<std::is_same_v<stage_output_t<A>, stage_input_t<B>> && adjacent_types_match<B, Rest...>::value> {};
} // namespace detail

//! Every argument is a stage (declares input/output and has forward/backward).
template <class... S>
concept every_argument_is_a_stage = (stage<S> && ...);

//! The output type of each stage is the input type of the stage after it.
template <class... S>
concept each_stage_output_type_is_the_next_stage_input_type =
    every_argument_is_a_stage<S...> && detail::adjacent_types_match<S...>::value;

//! A typed chain of stages. S may be std::reference_wrapper<T>: the pipeline then uses the
//! caller's object in place.
template <class... S>
    requires(sizeof...(S) >= 1) && each_stage_output_type_is_the_next_stage_input_type<S...>
class pipeline_t {
public:
    static constexpr std::size_t stage_count = sizeof...(S);
    using input = stage_input_t<std::tuple_element_t<0, std::tuple<S...>>>;
    using output = stage_output_t<std::tuple_element_t<stage_count - 1, std::tuple<S...>>>;
    template <std::size_t I>
    using stage_type = stage_object_t<std::tuple_element_t<I, std::tuple<S...>>>;

    explicit pipeline_t(S... stages) : stages_(std::move(stages)...) {}

    //! The I-th stage object.
    template <std::size_t I>
    stage_type<I>& stage()
    {
        auto& s = std::get<I>(stages_);
        if constexpr (std::is_same_v<std::remove_cvref_t<decltype(s)>, stage_type<I>>) return s;
        else return s.get();
    }

    static constexpr std::size_t size() noexcept { return stage_count; }

    //! Calls f(i, stage i) for every stage in order.
    template <class F>
    void visit_stages(F&& f)
    {
        [&]<std::size_t... I>(std::index_sequence<I...>) { (f(I, stage<I>()), ...); }(std::make_index_sequence<stage_count>{});
    }

private:
    std::tuple<S...> stages_;
};

namespace detail {
//! Compile-time diagnostics that name the offending type: the compiler prints the template
//! arguments of the failing instantiation next to the sentence.
template <class Stage>
constexpr bool diagnose_stage()
{
    static_assert(declares_input_and_output_types<Stage>,
                  "tpipe::pipeline: this stage type (Stage above) must declare `using input = X; using output = Y;` "
                  "with movable payload types");
    if constexpr (declares_input_and_output_types<Stage>) {
        static_assert(has_forward_from_input_to_output<Stage>,
                      "tpipe::pipeline: this stage type (Stage above) has no member "
                      "`output forward(const tpipe::unit&, input)`");
        static_assert(has_backward_from_output_grad_to_input_grad<Stage>,
                      "tpipe::pipeline: this stage type (Stage above) has no member "
                      "`input backward(const tpipe::unit&, output)`");
        if constexpr (stage<Stage>) return check_split_backward<Stage>();
    }
    return stage<Stage>;
}
template <class Output, class NextInput>
constexpr bool diagnose_connection()
{
    static_assert(std::is_same_v<Output, NextInput>,
                  "tpipe::pipeline: a stage's output type (Output above) is not the input type of the stage after "
                  "it (NextInput above)");
    return std::is_same_v<Output, NextInput>;
}
template <class... S, std::size_t... I>
constexpr bool diagnose_connections(std::index_sequence<I...>)
{
    using list = std::tuple<S...>;
    return (diagnose_connection<stage_output_t<std::tuple_element_t<I, list>>,
                                stage_input_t<std::tuple_element_t<I + 1, list>>>() &&
            ...);
}
template <class... S>
constexpr bool diagnose_chain()
{
    static_assert(sizeof...(S) >= 1, "tpipe::pipeline: needs at least one stage");
    if constexpr (!(diagnose_stage<S>() && ...)) return false;
    else return diagnose_connections<S...>(std::make_index_sequence<sizeof...(S) - 1>{});
}
} // namespace detail

//! Builds the pipeline graph; refuses, at compile time and naming the types, an argument that is
//! not a stage (saying which member it lacks) and a stage whose input type is not the previous
//! stage's output type.
template <class... S>
auto pipeline(S&&... stages)
{
    if constexpr (detail::diagnose_chain<std::decay_t<S>...>())
        return pipeline_t<std::decay_t<S>...>(std::forward<S>(stages)...);
}

//! A stage whose output type is its input type, so that any number of them chain.
template <class S>
concept uniform_stage = stage<S> && std::is_same_v<stage_input_t<S>, stage_output_t<S>>;

namespace detail {
//! uniform_stage<S>, or a static_assert sentence naming what S lacks. Checked inside the class
//! rather than as its constraint: a failed constraint makes the type unusable, and the compiler
//! then adds errors about every use of it ("cannot convert ... to 'int'") after the sentence.
template <class S>
constexpr bool diagnose_uniform()
{
    if constexpr (uniform_stage<S>) {
        return check_split_backward<stage_object_t<S>>();
    } else {
        if constexpr (diagnose_stage<stage_object_t<S>>())
            static_assert(uniform_stage<S>, "tpipe::uniform_pipeline: the stage's output type must be its input type, "
                                            "so that any number of them chain");
        return false;
    }
}
} // namespace detail

//! A chain of stages of one type, shaped at run time. S may be std::reference_wrapper<T>: the
//! pipeline then uses the caller's objects in place. S must model uniform_stage (checked with a
//! sentence, see detail::diagnose_uniform).
template <class S>
class uniform_pipeline {
    static_assert(detail::diagnose_uniform<S>());

public:
    using input = stage_input_t<S>;
    using output = stage_output_t<S>;
    using stage_type = stage_object_t<S>;

    //! Refuses an empty list of stages.
    explicit uniform_pipeline(std::vector<S> stages) : stages_(std::move(stages))
    {
        if (stages_.empty()) throw invalid_argument("uniform_pipeline: needs at least one stage, got none");
    }

    std::size_t size() const noexcept { return stages_.size(); }
    stage_type& stage(std::size_t i)
    {
        if (i >= stages_.size())
            throw invalid_argument("uniform_pipeline: stage " + std::to_string(i) + " is outside [0, " +
                                   std::to_string(stages_.size()) + ")");
        if constexpr (std::is_same_v<S, stage_type>) return stages_[i];
        else return stages_[i].get();
    }

    //! Calls f(i, stage i) for every stage in order.
    template <class F>
    void visit_stages(F&& f)
    {
        for (std::size_t i = 0; i < stages_.size(); ++i) f(i, stage(i));
    }

private:
    std::vector<S> stages_;
};

namespace detail {
//! The visitor pipeline_graph offers visit_stages: it accepts stages only, so a graph that hands
//! it anything else fails where the runner binds it, naming the type.
struct stage_visit_probe {
    template <stage S>
    void operator()(std::size_t, S&) const
    {
    }
};
} // namespace detail

//! Something tpipe::run can run: declares its input and output payload types, says how many
//! stages it has, and calls a visitor with each stage (tpipe::pipeline, tpipe::uniform_pipeline).
template <class P>
concept pipeline_graph = requires(std::remove_cvref_t<P>& p) {
    typename std::remove_cvref_t<P>::input;
    typename std::remove_cvref_t<P>::output;
    { p.size() } -> std::convertible_to<std::size_t>;
    p.visit_stages(detail::stage_visit_probe{});
} && payload<typename std::remove_cvref_t<P>::input> && payload<typename std::remove_cvref_t<P>::output>;

} // namespace tpipe
