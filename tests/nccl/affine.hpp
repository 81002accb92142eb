#pragma once
// The host stage of the NCCL tests (tpipe_test::affine, tests/exec/affine.hpp) and their inputs:
// integer-valued doubles, so sums are exact in any order (NCCL's order is not the rank-order
// fold) and a run on GPUs can be compared bit for bit. Its payload, std::vector<double>, has a
// "device" form here (host memory from a counting pool) for the fake NCCL: declared in this header,
// which every test of this executable that runs a pipeline includes, since a runner's channel
// over links is instantiated for its payload in every such file and must see the same traits.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../exec/affine.hpp"
#include "tpipe/transport/device_payload_traits.hpp"

namespace nccl_test {

using tpipe_test::affine;
using tpipe_test::coef_a;
using tpipe_test::coef_b;
using tpipe_test::dvec;
using tpipe_test::affine_stages;

//! Input of microbatch m of replica d: sizes 0..3 (microbatch 0's payloads are empty), integer values.
inline dvec sample(int d, int m)
{
    dvec x(static_cast<std::size_t>(m % 4));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(d * 10 + m * 3 + int(i));
    return x;
}

//! The loss gradient the tests seed backward with (integer-valued).
inline dvec loss_grad(dvec y)
{
    for (double& v : y) v = double(static_cast<long long>(v) % 5 + 1);
    return y;
}

} // namespace nccl_test

namespace tpipe::nccl::fake {

//! Counts the payloads receivers made.
struct host_pool {
    std::atomic<int> made{0};
};

} // namespace tpipe::nccl::fake

template <>
struct tpipe::device_payload_traits<std::vector<double>> {
    struct header {
        std::uint64_t count;
    };
    using pool = tpipe::nccl::fake::host_pool;
    static header header_of(const std::vector<double>& v) { return {v.size()}; }
    static std::vector<double> make(const header& h, tpipe::nccl::fake::host_pool& pool)
    {
        pool.made.fetch_add(1);
        return std::vector<double>(static_cast<std::size_t>(h.count));
    }
    static std::span<const std::byte> device_bytes(const std::vector<double>& v) { return std::as_bytes(std::span<const double>(v)); }
    static std::span<std::byte> device_bytes(std::vector<double>& v) { return std::as_writable_bytes(std::span<double>(v)); }
};
