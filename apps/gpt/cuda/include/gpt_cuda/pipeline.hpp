#pragma once
// The CUDA GPT as tpipe stages on the GPU: gpt_cuda/basic_pipeline.hpp over the device backend,
// run on tpipe::cuda::engine (several stages may share a GPU, one compute stream each).
#include <tpipe/cuda/engine.hpp>

#include "gpt_cuda/basic_pipeline.hpp"
#include "gpt_cuda/model.hpp"
#include "gpt_cuda/payload.hpp"

namespace gpt::cuda {

using stage = basic_stage<device_backend>;
using pipelined_model = basic_pipelined_model<device_backend>;
using pipelined_model_bf16 = basic_pipelined_model<device_backend, bf16>;
static_assert(tpipe::split_backward_stage<stage> && tpipe::split_backward_stage<basic_stage<device_backend, bf16>>);

} // namespace gpt::cuda
