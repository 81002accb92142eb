#pragma once
// Test helpers for the NCCL transport on the CPU: "processes" are threads of this test (their
// control plane: thread_control.hpp), "device" payloads are std::vector<double> in host memory
// allocated from a counting pool.
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "fake_nccl.hpp"
#include "thread_control.hpp"
#include "tpipe/exec/layout.hpp"
#include "tpipe/nccl/basic_transport.hpp"
#include "tpipe/cuda/peer_payload.hpp"

namespace tpipe::nccl::fake {

//! Counts the payloads receivers made.
struct host_pool {
    std::atomic<int> made{0};
};

using transport = basic_transport<api, control, host_pool>;

} // namespace tpipe::nccl::fake

template <>
struct tpipe::cuda::device_payload_traits<std::vector<double>> {
    struct header {
        std::uint64_t count;
    };
    static header header_of(const std::vector<double>& v) { return {v.size()}; }
    static std::vector<double> make(const header& h, tpipe::nccl::fake::host_pool& pool)
    {
        pool.made.fetch_add(1);
        return std::vector<double>(static_cast<std::size_t>(h.count));
    }
    static std::span<const std::byte> device_bytes(const std::vector<double>& v) { return std::as_bytes(std::span<const double>(v)); }
    static std::span<std::byte> device_bytes(std::vector<double>& v) { return std::as_writable_bytes(std::span<double>(v)); }
};
static_assert(tpipe::transport<tpipe::nccl::fake::transport>);
