#pragma once
// The payload concept: what travels between stages (activations forward, gradients backward).
// Stages declare their payload types (tpipe/exec/stage.hpp); channels carry them
// (tpipe/transport/channel.hpp).
#include <concepts>
#include <type_traits>

namespace tpipe {

//! A payload moved between stages: an object type that can be moved (copies are never made).
template <class T>
concept payload = std::is_object_v<T> && std::move_constructible<T> && std::is_nothrow_destructible_v<T>;

} // namespace tpipe
