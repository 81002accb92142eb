#pragma once
// Built-in shapes, devices and links for the analytic latency model.
// Models: GPT-3 configurations of the TeraPipe code (reference/terapipe.md table 4.1).
// Devices: dense fp16/bf16 tensor-core peak and HBM bandwidth from the vendors' data sheets
// (SXM parts); intra-node bandwidth is NVLink per direction. Efficiencies are typical large
// GEMM / streaming figures, not measurements; profile for real plans.
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

inline constexpr device_spec v100{"v100", 125e12, 900e9, 150e9, 5e-6, 0.7, 0.8};
inline constexpr device_spec a100{"a100", 312e12, 2039e9, 300e9, 4e-6, 0.7, 0.8};
inline constexpr device_spec h100{"h100", 989e12, 3350e9, 450e9, 3e-6, 0.7, 0.8};
inline constexpr device_spec h200{"h200", 989e12, 4800e9, 450e9, 3e-6, 0.7, 0.8};

//! AWS p3.16xlarge's 25 Gbit/s between nodes (the TeraPipe cluster).
inline constexpr link_spec ethernet_25g{"eth-25g", 25e9 / 8, 30e-6};
inline constexpr link_spec infiniband_hdr{"ib-hdr", 200e9 / 8, 5e-6};
inline constexpr link_spec infiniband_ndr{"ib-ndr", 400e9 / 8, 5e-6};

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

//! The analytic model of one stage of `shape` split over `stages` stages on `dev`.
inline analytic_latency analytic(const transformer_shape& shape, int stages, const device_spec& dev,
                                 analytic_latency::options opt = {})
{
    return analytic_latency(shape, layers_per_stage(shape.layers, stages), dev, default_link(dev), opt);
}

} // namespace tpipe::presets
