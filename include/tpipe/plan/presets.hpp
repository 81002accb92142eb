#pragma once
// Built-in shapes, devices and links for the analytic latency model. Sources, per field:
//   models: GPT-3 configurations of the TeraPipe code (docs/papers.md table 4.1);
//   peak_flops, memory_bandwidth, intra_node_bandwidth (NVLink per direction), sm_count: the
//     vendors' data sheets (SXM parts: V100 80 SMs, A100 108, H100 and H200 132);
//   gemm_tile 128: the 128 x 128 output tile of cuBLAS's large half-precision kernels, the
//     example NVIDIA's "Matrix Multiplication Background" guide uses for tile and wave
//     quantisation;
//   matmul_efficiency 0.7, memory_efficiency 0.8, kernel_overhead: typical large-GEMM /
//     streaming / launch figures, not measurements;
//   all_reduce_latency 20 us: the small-message floor of an 8-GPU NCCL ring all-reduce in a
//     node (nccl-tests order of magnitude), not measured here;
//   host_op_overhead 30 us: FITTED. Eager PyTorch spends 10-40 us of host time per op; 30 us is
//     the value in that range with which the calibrated model reproduces TeraPipe's GPT-3 1B
//     result (no gain from token slicing). It is a property of the framework, so every device
//     gets the same value;
//   eth-25g efficiency 0.75 and latency 100 us: FITTED to TeraPipe's GPT-3 13B and 175B
//     iteration times (AWS p3.16xlarge, NCCL over TCP sockets, blocking broadcasts); the
//     official code measured its own link and did not publish the data. 0.75 of 25 Gbit/s is
//     18.75 Gbit/s;
//   ib-hdr / ib-ndr efficiency 0.9: typical nccl-tests bus bandwidth over InfiniBand.
// docs/planner.md lists each preset with what it predicts for TeraPipe's settings.
#include <algorithm>
#include <array>
#include <string>
#include <string_view>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/analytic_latency.hpp"

namespace tpipe::presets {

inline constexpr transformer_shape gpt3_1b{"gpt3-1b", 24, 2048, 16, 50257};
inline constexpr transformer_shape gpt3_13b{"gpt3-13b", 40, 5120, 40, 50257};
inline constexpr transformer_shape gpt3_44b{"gpt3-44b", 96, 6144, 48, 50257};
inline constexpr transformer_shape gpt3_175b{"gpt3-175b", 96, 12288, 96, 50257};

namespace detail {
constexpr device_spec gpu(std::string_view name, double peak, double hbm, double nvlink, double launch, int sms)
{
    return {.name = name,
            .peak_flops = peak,
            .memory_bandwidth = hbm,
            .intra_node_bandwidth = nvlink,
            .kernel_overhead = launch,
            .matmul_efficiency = 0.7,
            .memory_efficiency = 0.8,
            .sm_count = sms,
            .gemm_tile = 128,
            .all_reduce_latency = 20e-6,
            .host_op_overhead = 30e-6};
}
} // namespace detail

inline constexpr device_spec v100 = detail::gpu("v100", 125e12, 900e9, 150e9, 5e-6, 80);
inline constexpr device_spec a100 = detail::gpu("a100", 312e12, 2039e9, 300e9, 4e-6, 108);
inline constexpr device_spec h100 = detail::gpu("h100", 989e12, 3350e9, 450e9, 3e-6, 132);
inline constexpr device_spec h200 = detail::gpu("h200", 989e12, 4800e9, 450e9, 3e-6, 132);

//! AWS p3.16xlarge's 25 Gbit/s between nodes (the TeraPipe cluster).
inline constexpr link_spec ethernet_25g{.name = "eth-25g", .bandwidth = 25e9 / 8, .latency = 100e-6, .efficiency = 0.75};
inline constexpr link_spec infiniband_hdr{.name = "ib-hdr", .bandwidth = 200e9 / 8, .latency = 5e-6, .efficiency = 0.9};
inline constexpr link_spec infiniband_ndr{.name = "ib-ndr", .bandwidth = 400e9 / 8, .latency = 5e-6, .efficiency = 0.9};

inline constexpr std::array models{gpt3_1b, gpt3_13b, gpt3_44b, gpt3_175b};
inline constexpr std::array devices{v100, a100, h100, h200};
inline constexpr std::array links{ethernet_25g, infiniband_hdr, infiniband_ndr};

namespace detail {
template <class T, std::size_t N>
const T& find(const std::array<T, N>& table, std::string_view name, const char* what)
{
    for (const auto& e : table)
        if (e.name == name) return e;
    std::string known;
    for (const auto& e : table) known += (known.empty() ? "" : ", ") + std::string(e.name);
    tpipe::detail::refuse(std::string("unknown ") + what + " preset \"" + std::string(name) + "\"; known: " + known);
}
} // namespace detail

inline const transformer_shape& model(std::string_view name) { return detail::find(models, name, "model"); }
inline const device_spec& device(std::string_view name) { return detail::find(devices, name, "device"); }
inline const link_spec& link(std::string_view name) { return detail::find(links, name, "link"); }

//! The inter-node link the device usually comes with: V100 as in TeraPipe's AWS cluster,
//! A100 with HDR InfiniBand, H100/H200 with NDR.
inline const link_spec& default_link(const device_spec& d)
{
    if (d.name == "v100") return ethernet_25g;
    if (d.name == "a100") return infiniband_hdr;
    return infiniband_ndr;
}

//! Layers on the slowest stage when `layers` are split over `stages` contiguously with the
//! remainder on the first stages (as TeraPipe does). Refuses more stages than layers.
inline int layers_per_stage(int layers, int stages)
{
    tpipe::detail::require(stages >= 1 && stages <= layers,
                           "cannot place " + std::to_string(layers) + " layers on " + std::to_string(stages) +
                               " pipeline stages; use 1.." + std::to_string(layers) + " stages");
    return (layers + stages - 1) / stages;
}

//! The analytic model of one stage of `shape` split over `stages` stages on `dev`, linked by
//! `lnk` (by default the device's usual link).
inline analytic_latency analytic(const transformer_shape& shape, int stages, const device_spec& dev,
                                 const link_spec& lnk, analytic_latency::options opt = {})
{
    return analytic_latency(shape, layers_per_stage(shape.layers, stages), dev, lnk, opt);
}
inline analytic_latency analytic(const transformer_shape& shape, int stages, const device_spec& dev,
                                 analytic_latency::options opt = {})
{
    return analytic(shape, stages, dev, default_link(dev), opt);
}

} // namespace tpipe::presets
