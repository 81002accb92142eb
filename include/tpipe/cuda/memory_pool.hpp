#pragma once
// tpipe::cuda::memory_pool and device_buffer over the CUDA runtime (see basic_memory_pool.hpp).
#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/basic_memory_pool.hpp"
#include "tpipe/cuda/runtime_driver.hpp"

namespace tpipe::cuda {

using memory_pool = basic_memory_pool<runtime_driver>;
using device_buffer = basic_device_buffer<runtime_driver>;

//! A pool over the CUDA runtime and the process-wide event pool.
inline memory_pool make_memory_pool(memory_pool_options o = {})
{
    return memory_pool(runtime_driver::instance(), default_event_pool(), o);
}

} // namespace tpipe::cuda
