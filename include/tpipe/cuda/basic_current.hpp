#pragma once
// The stage whose compute function a CUDA engine is running on this thread: its compute stream,
// GPU and pipeline device. The engine sets them around the call (compute_scope); a stage functor
// enqueues its kernels on current_stream() (current.hpp over the CUDA runtime).
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/driver.hpp"

namespace tpipe::cuda {

template <driver D>
struct compute_context {
    typename D::stream_type stream{};
    int gpu = -1;     //!< the CUDA device
    int device = -1;  //!< the engine's device (pipeline rank placement)
};

namespace detail {
template <driver D>
inline thread_local const compute_context<D>* current_context = nullptr;

//! Makes `c` the current compute context of this thread for its scope (nesting restores).
template <driver D>
class compute_scope {
public:
    explicit compute_scope(const compute_context<D>& c) noexcept : previous_(std::exchange(current_context<D>, &c)) {}
    compute_scope(const compute_scope&) = delete;
    compute_scope& operator=(const compute_scope&) = delete;
    ~compute_scope() { current_context<D> = previous_; }

private:
    const compute_context<D>* previous_;
};
} // namespace detail

//! The compute context set by the engine on this thread; throws tpipe::error outside one (a
//! kernel enqueued elsewhere would not be ordered before the engine's completion event).
template <driver D>
const compute_context<D>& basic_current_context()
{
    if (!detail::current_context<D>)
        throw error("cuda::current_stream()/current_device(): no stage compute function is running on this thread; "
                    "call them from the function passed to cuda::engine::compute (a stage's forward/backward)");
    return *detail::current_context<D>;
}

} // namespace tpipe::cuda
