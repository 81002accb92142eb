#pragma once
// tpipe::pipeline(stage0, stage1, ...): the compile-time graph of a pipeline. Each argument
// models tpipe::stage; the output type of each stage must be the input type of the next.
// Placement (which device runs which stage) is runtime data given to tpipe::run, so the same
// pipeline type runs on any number of devices, with one or several stages per device.
#include <cstddef>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

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
    static constexpr std::size_t size = sizeof...(S);
    using input = stage_input_t<std::tuple_element_t<0, std::tuple<S...>>>;
    using output = stage_output_t<std::tuple_element_t<size - 1, std::tuple<S...>>>;
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

private:
    std::tuple<S...> stages_;
};

//! Builds the pipeline graph; refuses, at compile time, a stage whose input type is not the
//! previous stage's output type.
template <class... S>
    requires(sizeof...(S) >= 1) && each_stage_output_type_is_the_next_stage_input_type<std::decay_t<S>...>
pipeline_t<std::decay_t<S>...> pipeline(S&&... stages)
{
    return pipeline_t<std::decay_t<S>...>(std::forward<S>(stages)...);
}

template <class T>
struct is_pipeline : std::false_type {};
template <class... S>
struct is_pipeline<pipeline_t<S...>> : std::true_type {};

//! A pipeline built by tpipe::pipeline.
template <class P>
concept pipeline_graph = is_pipeline<std::remove_cvref_t<P>>::value;

} // namespace tpipe
