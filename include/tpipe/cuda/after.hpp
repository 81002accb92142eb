#pragma once
// tpipe::cuda::after over the CUDA runtime (see basic_after.hpp for the semantics):
//
//   co_await tpipe::cuda::after(stream, "rank 1 stage 1 F(unit 3)");
//   co_await tpipe::cuda::after(stream, what, [&]() -> std::optional<std::string> { ... });
//
// Events come from one process-wide pool (default_event_pool()), per GPU.
#include <cuda_runtime_api.h>

#include <atomic>
#include <string>
#include <utility>

#include "tpipe/cuda/basic_after.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/cuda/runtime_driver.hpp"

namespace tpipe::cuda {

using event_pool = basic_event_pool<runtime_driver>;

//! The process-wide event pool of the CUDA runtime.
inline event_pool& default_event_pool()
{
    static event_pool pool(runtime_driver::instance());
    return pool;
}

//! Completes when the work enqueued on `stream` so far has completed; `what` names it in errors.
template <class Check = no_check>
basic_after<runtime_driver, Check> after(cudaStream_t stream, std::string what, Check check = {},
                                         const std::atomic<bool>* cancelled = nullptr)
{
    return after_on(default_event_pool(), runtime_driver::instance(), stream, std::move(what), std::move(check), cancelled);
}

} // namespace tpipe::cuda
