#pragma once
// current_stream() / current_device() over the CUDA runtime (see basic_current.hpp).
#include <cuda_runtime_api.h>

#include "tpipe/cuda/basic_current.hpp"
#include "tpipe/cuda/runtime_driver.hpp"

namespace tpipe::cuda {

//! The compute stream of the stage whose compute function runs on this thread.
inline cudaStream_t current_stream() { return basic_current_context<runtime_driver>().stream; }
//! The GPU of that stage (already current on this thread while the function runs).
inline int current_device() { return basic_current_context<runtime_driver>().gpu; }

} // namespace tpipe::cuda
