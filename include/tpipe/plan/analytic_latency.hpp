#pragma once
// A latency model derived from a transformer's shape and a device's roofline, for planning
// before anything can be profiled. Per layer and pass, each GEMM costs
//     max(flops / (peak * matmul_efficiency), bytes / (memory_bandwidth * memory_efficiency)),
// which makes short slices inefficient (weights are read whatever the slice length), the way
// a measured T0(b, s) is. Attention over c context tokens adds 4*b*H*(s*c + s(s+1)/2) flops
// per forward. Backward costs twice the forward. A stage of n layers costs
//     t(b, s, c) = n * (forward + backward) + 2 * (link latency + activation bytes / link bandwidth)
// (activations forward, gradients backward), plus the LM head when `with_head`.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"

namespace tpipe {

//! A decoder-only transformer's shape.
struct transformer_shape {
    std::string_view name = "custom";
    int layers = 1;
    std::int64_t hidden = 1;
    int heads = 1;
    std::int64_t vocab = 1;
};

//! An accelerator's roofline (dense half-precision peak) and per-kernel overhead.
struct device_spec {
    std::string_view name = "custom";
    double peak_flops = 1;            //!< FLOP/s at the planned precision
    double memory_bandwidth = 1;      //!< bytes/s
    double intra_node_bandwidth = 1;  //!< bytes/s per direction, for tensor-parallel all-reduce
    double kernel_overhead = 0;       //!< seconds per kernel launch
    double matmul_efficiency = 1;     //!< achieved fraction of peak_flops in large GEMMs
    double memory_efficiency = 1;     //!< achieved fraction of memory_bandwidth
};

//! The link between consecutive pipeline stages.
struct link_spec {
    std::string_view name = "custom";
    double bandwidth = 1;  //!< bytes/s
    double latency = 0;    //!< seconds per message
};

class analytic_latency {
public:
    struct options {
        int precision_bytes = 2;   //!< bytes per activation / weight element (fp16/bf16: 2)
        int tensor_parallel = 1;   //!< ways each layer is split inside a node (Megatron)
        bool with_head = false;    //!< the stage also runs the LM head (the last stage)
    };

    //! Refuses non-positive sizes, rates, efficiencies outside (0, 1], and heads or
    //! tensor-parallel degrees that do not divide the hidden size.
    analytic_latency(transformer_shape model, int layers_per_stage, device_spec device, link_spec link,
                     options opt)
        : model_(model), layers_per_stage_(layers_per_stage), device_(device), link_(link), opt_(opt)
    {
        using detail::require;
        require(model_.layers >= 1 && model_.hidden >= 1 && model_.heads >= 1 && model_.vocab >= 1,
                "analytic latency: the transformer needs layers, hidden, heads and vocab >= 1");
        require(model_.hidden % model_.heads == 0,
                "analytic latency: hidden " + std::to_string(model_.hidden) + " must be a multiple of heads " +
                    std::to_string(model_.heads));
        require(layers_per_stage_ >= 1, "analytic latency: layers per stage must be >= 1, got " +
                                            std::to_string(layers_per_stage_));
        require(positive(device_.peak_flops) && positive(device_.memory_bandwidth) &&
                    positive(device_.intra_node_bandwidth),
                "analytic latency: device peak_flops, memory_bandwidth and intra_node_bandwidth must be > 0");
        require(std::isfinite(device_.kernel_overhead) && device_.kernel_overhead >= 0,
                "analytic latency: device kernel_overhead must be >= 0 seconds");
        require(device_.matmul_efficiency > 0 && device_.matmul_efficiency <= 1 && device_.memory_efficiency > 0 &&
                    device_.memory_efficiency <= 1,
                "analytic latency: efficiencies must lie in (0, 1]");
        require(positive(link_.bandwidth) && std::isfinite(link_.latency) && link_.latency >= 0,
                "analytic latency: link bandwidth must be > 0 bytes/s and latency >= 0 s");
        require(opt_.precision_bytes >= 1, "analytic latency: precision must be >= 1 byte per element");
        require(opt_.tensor_parallel >= 1 && model_.heads % opt_.tensor_parallel == 0,
                "analytic latency: tensor parallel degree " + std::to_string(opt_.tensor_parallel) +
                    " must be >= 1 and divide the " + std::to_string(model_.heads) + " heads");
    }
    analytic_latency(transformer_shape model, int layers_per_stage, device_spec device, link_spec link)
        : analytic_latency(model, layers_per_stage, device, link, options{})
    {
    }

    const transformer_shape& model() const { return model_; }
    int layers_per_stage() const { return layers_per_stage_; }
    const device_spec& device() const { return device_; }
    const link_spec& link() const { return link_; }
    const options& settings() const { return opt_; }

    //! Every term grows with s, so planners may stop scanning at the first slice over a cap.
    bool monotone_in_tokens() const { return true; }

    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        detail::require_unit_shape(b, s, c, "analytic latency");
        const double B = static_cast<double>(b), S = static_cast<double>(s), C = static_cast<double>(c);
        const double H = static_cast<double>(model_.hidden), tp = opt_.tensor_parallel, p = opt_.precision_bytes;
        const double m = B * S; // GEMM rows
        // Megatron split: QKV and fc1 column-parallel, out-proj and fc2 row-parallel.
        const double gemms = gemm(m, H, 3 * H / tp) + gemm(m, H / tp, H) + gemm(m, H, 4 * H / tp) +
                             gemm(m, 4 * H / tp, H);
        const double attn_flops = 4 * B * (H / tp) * (S * C + S * (S + 1) / 2);
        const double attn_bytes = p * B * (H / tp) * (2 * (C + S) + 2 * S); // K,V of c+s; Q in; O out
        const double attention = roof(attn_flops, attn_bytes);
        const double elementwise = memory(p * m * H * (10 + 8 / tp)); // layer norms, residuals, activation
        double all_reduce = 0;
        if (opt_.tensor_parallel > 1) // two per pass: after attention and after the MLP
            all_reduce = 2 * (2 * (tp - 1) / tp * p * m * H / device_.intra_node_bandwidth + device_.kernel_overhead);
        constexpr double kernels_per_forward = 12;
        const double forward = gemms + attention + elementwise + all_reduce + kernels_per_forward * device_.kernel_overhead;
        double stage = layers_per_stage_ * 3 * forward; // backward = 2 x forward
        if (opt_.with_head) stage += 3 * gemm(m, H, static_cast<double>(model_.vocab) / tp);
        stage += 2 * (link_.latency + p * m * H / link_.bandwidth);
        return stage;
    }

private:
    static bool positive(double v) { return std::isfinite(v) && v > 0; }
    double memory(double bytes) const { return bytes * seconds_per_byte_; }
    double roof(double flops, double bytes) const { return std::max(flops * seconds_per_flop_, memory(bytes)); }
    //! (m x k) * (k x n): reads both operands, writes the product.
    double gemm(double m, double k, double n) const
    {
        return roof(2 * m * k * n, opt_.precision_bytes * (m * k + k * n + m * n));
    }

    transformer_shape model_;
    int layers_per_stage_;
    device_spec device_;
    link_spec link_;
    options opt_;
    // Reciprocal achieved rates: planners evaluate millions of points.
    double seconds_per_flop_ = 1 / (device_.peak_flops * device_.matmul_efficiency);
    double seconds_per_byte_ = 1 / (device_.memory_bandwidth * device_.memory_efficiency);
};

} // namespace tpipe
