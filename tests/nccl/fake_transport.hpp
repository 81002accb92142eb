#pragma once
// Test helpers for the NCCL transport on the CPU: "processes" are threads of this test (their
// control plane: thread_control.hpp), "device" payloads are std::vector<double> in host memory
// allocated from a counting pool (affine.hpp).
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "affine.hpp"
#include "fake_nccl.hpp"
#include "thread_control.hpp"
#include "tpipe/exec/layout.hpp"
#include "tpipe/nccl/basic_transport.hpp"
#include "tpipe/transport/device_payload_traits.hpp"

namespace tpipe::nccl::fake {

using transport = basic_transport<api, control, host_pool>;

} // namespace tpipe::nccl::fake

static_assert(tpipe::transport<tpipe::nccl::fake::transport>);
