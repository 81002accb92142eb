#pragma once
// tpipe::cuda::engine over the CUDA runtime (see basic_engine.hpp), with current_stream(),
// after() and the pools.
//
//   tpipe::cuda::engine eng({.gpu_of_device = {0, 0}});
//   tpipe::run(pipe, program, eng, io);
#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/basic_engine.hpp"
#include "tpipe/cuda/current.hpp"
#include "tpipe/cuda/memory_pool.hpp"
#include "tpipe/cuda/runtime_driver.hpp"

namespace tpipe::cuda {

using engine_options = basic_engine_options<runtime_driver>;

//! The CUDA engine over the runtime driver.
class engine : public basic_engine<runtime_driver> {
public:
    explicit engine(engine_options o) : basic_engine<runtime_driver>(runtime_driver::instance(), std::move(o)) {}
};
static_assert(tpipe::engine<engine>);
static_assert(tpipe::cancellable_engine<engine> && tpipe::reporting_engine<engine>);

} // namespace tpipe::cuda
