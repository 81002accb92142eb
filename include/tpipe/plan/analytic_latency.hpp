#pragma once
// A latency model derived from a transformer's shape and a device, for planning before
// anything can be profiled. Two forms:
//
// calibrated (the default): what one unit really costs in an eager framework such as the
//   TeraPipe code (PyTorch + Megatron, blocking NCCL). Per layer, every GEMM of the forward and
//   of the backward (input gradient and weight gradient) costs
//       max(flops / (peak * matmul_efficiency * wave_utilisation), bytes / achieved bandwidth)
//   where wave_utilisation is the fraction of the SMs' tile slots the GEMM's output tiles fill
//   (tile and wave quantisation: at 128 rows a V100 runs its GEMMs at 45-60 % of the large-GEMM
//   rate). The backward then adds `grad += dW` for every parameter: every slice reads the
//   gradient and dW and writes the gradient, 3 x the stage's weights in memory traffic. Each
//   tensor-parallel all-reduce pays `all_reduce_latency` on top of its bytes, and a layer takes
//   at least the host's time to issue its ops (`ops_per_layer x host_op_overhead`). A stage of n
//   layers costs
//       t(b, s, c) = n * layer + 2 * (link latency + activation bytes / (link bandwidth * efficiency))
// roofline: the earlier model, kept for comparison: a max(compute, memory) roofline per GEMM at
//   the large-GEMM efficiency, backward = 2 x forward, no accumulation, no host floor, the
//   link at its nominal rate.
// Both: attention over c context tokens adds 4*b*H*(s*c + s(s+1)/2) flops per forward, plus the
// LM head when `with_head`.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

//! An accelerator's roofline (dense half-precision peak), its GEMM geometry and the host
//! overheads of running it from an eager framework.
struct device_spec {
    std::string_view name = "custom";
    double peak_flops = 1;            //!< FLOP/s at the planned precision
    double memory_bandwidth = 1;      //!< bytes/s
    double intra_node_bandwidth = 1;  //!< bytes/s per direction, for tensor-parallel all-reduce
    double kernel_overhead = 0;       //!< seconds per kernel launch (device side)
    double matmul_efficiency = 1;     //!< achieved fraction of peak_flops in large GEMMs
    double memory_efficiency = 1;     //!< achieved fraction of memory_bandwidth
    int sm_count = 0;                 //!< streaming multiprocessors; 0: no wave quantisation
    int gemm_tile = 128;              //!< rows (= columns) of one GEMM output tile
    double all_reduce_latency = 0;    //!< seconds per all-reduce beyond its bytes (calibrated form)
    double host_op_overhead = 0;      //!< host seconds to issue one framework op (calibrated form)
};

//! The link between consecutive pipeline stages.
struct link_spec {
    std::string_view name = "custom";
    double bandwidth = 1;   //!< bytes/s, nominal
    double latency = 0;     //!< seconds per message
    double efficiency = 1;  //!< achieved fraction of bandwidth (calibrated form)
};

enum class analytic_form { calibrated, roofline };

inline std::string_view to_string(analytic_form f) { return f == analytic_form::roofline ? "roofline" : "calibrated"; }

inline analytic_form analytic_form_of(std::string_view name)
{
    if (name == "calibrated") return analytic_form::calibrated;
    if (name == "roofline") return analytic_form::roofline;
    detail::refuse("unknown analytic form \"" + std::string(name) + "\"; use \"calibrated\" or \"roofline\"");
}

//! One number the model uses, for "say what was used" listings.
struct model_parameter {
    std::string name;
    double value;
    std::string unit;
};

class analytic_latency {
public:
    struct options {
        int precision_bytes = 2;   //!< bytes per activation / weight element (fp16/bf16: 2)
        int tensor_parallel = 1;   //!< ways each layer is split inside a node (Megatron)
        bool with_head = false;    //!< the stage also runs the LM head (the last stage)
        analytic_form form = analytic_form::calibrated;
        int gradient_bytes = 2;    //!< bytes per accumulated gradient element (TeraPipe: fp16 .grad)
    };

    // Framework ops of one layer of the TeraPipe / Megatron block (docs/papers.md 3.1):
    // forward LN, QKV GEMM, q scale, 2 cache writes, QK^T, mask add, 2 casts, softmax, AV,
    // reshape, out-proj, all-reduce, bias, residual, LN, fc1, ReLU, fc2, all-reduce, bias,
    // residual and two views (24); a backward issues about twice as many; then one `grad += dW`
    // per parameter tensor (4 weights, 4 biases, 2 x 2 layer-norm).
    static constexpr int forward_ops_per_layer = 24;
    static constexpr int backward_ops_per_layer = 2 * forward_ops_per_layer;
    static constexpr int parameter_tensors_per_layer = 12;
    static constexpr int ops_per_layer = forward_ops_per_layer + backward_ops_per_layer + parameter_tensors_per_layer;

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
        require(non_negative(device_.kernel_overhead) && non_negative(device_.all_reduce_latency) &&
                    non_negative(device_.host_op_overhead),
                "analytic latency: device kernel_overhead, all_reduce_latency and host_op_overhead must be >= 0 "
                "seconds");
        require(device_.sm_count >= 0 && device_.gemm_tile >= 1,
                "analytic latency: device sm_count must be >= 0 (0: no wave quantisation) and gemm_tile >= 1");
        require(fraction(device_.matmul_efficiency) && fraction(device_.memory_efficiency) &&
                    fraction(link_.efficiency),
                "analytic latency: matmul, memory and link efficiencies must lie in (0, 1]");
        require(positive(link_.bandwidth) && non_negative(link_.latency),
                "analytic latency: link bandwidth must be > 0 bytes/s and latency >= 0 s");
        // The widths numbers are stored in (fp8 1, fp16/bf16 2, fp32 4, fp64 8): a 3-byte element
        // is a typo, not a format.
        auto width = [](int b) { return b == 1 || b == 2 || b == 4 || b == 8; };
        require(width(opt_.precision_bytes) && width(opt_.gradient_bytes),
                "analytic latency: precision and gradient bytes must be 1, 2, 4 or 8 bytes per element, got " +
                    std::to_string(opt_.precision_bytes) + " and " + std::to_string(opt_.gradient_bytes));
        require(layers_per_stage <= model_.layers,
                "analytic latency: " + std::to_string(layers_per_stage) + " layers per stage, but the model has " +
                    std::to_string(model_.layers) + " layers");
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

    //! Every term grows with s (wave counts only grow with rows), so planners may stop scanning
    //! at the first slice over a cap.
    bool monotone_in_tokens() const { return true; }

    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        detail::require_unit_shape(b, s, c, "analytic latency");
        const double B = static_cast<double>(b), S = static_cast<double>(s), C = static_cast<double>(c);
        const double H = static_cast<double>(model_.hidden), p = opt_.precision_bytes;
        const double m = B * S; // GEMM rows
        const double attn_flops = 4 * B * (H / tp()) * (S * C + S * (S + 1) / 2);
        const double attn_bytes = p * B * (H / tp()) * (2 * (C + S) + 2 * S); // K,V of c+s; Q in; O out
        const double attention = roof(attn_flops, attn_bytes);
        const double elementwise = memory(p * m * H * (10 + 8 / tp())); // layer norms, residuals, activation
        double stage = 0;
        if (opt_.form == analytic_form::roofline) {
            double all_reduce = 0;
            if (opt_.tensor_parallel > 1) // two per pass: after attention and after the MLP
                all_reduce = 2 * (all_reduce_bytes(m) / device_.intra_node_bandwidth + device_.kernel_overhead);
            double gemms = 0;
            for (const auto& [k, n] : linear_shapes()) gemms += roof(2 * m * k * n, p * (m * k + k * n + m * n));
            constexpr double kernels_per_forward = 12;
            const double forward =
                gemms + attention + elementwise + all_reduce + kernels_per_forward * device_.kernel_overhead;
            stage = layers_per_stage_ * 3 * forward; // backward = 2 x forward
        } else {
            double all_reduce = 0;
            if (opt_.tensor_parallel > 1)
                all_reduce = 2 * (all_reduce_bytes(m) / device_.intra_node_bandwidth + device_.all_reduce_latency);
            double forward = attention + elementwise + all_reduce + forward_ops_per_layer * device_.kernel_overhead;
            double backward =
                2 * (attention + elementwise) + all_reduce + backward_ops_per_layer * device_.kernel_overhead;
            for (const auto& [k, n] : linear_shapes()) {
                forward += gemm(m, k, n, m, n);  // Y = X W
                backward += gemm(m, n, k, m, k); // dX = dY W^T
                backward += gemm(k, m, n, k, n); // dW = X^T dY
            }
            backward += accumulation_seconds();
            const double host = ops_per_layer * device_.host_op_overhead;
            stage = layers_per_stage_ * std::max(forward + backward, host);
        }
        if (opt_.with_head) {
            const double V = vocab_per_rank();
            stage += 3 * roof(2 * m * H * V, p * (m * H + H * V + m * V));
        }
        return stage + 2 * transfer_seconds(b, s);
    }

    //! One message between stages (the activation forward or its gradient backward) of a
    //! b x s unit: part of seconds(), which pays two; simulators with link resources price it
    //! separately.
    double transfer_seconds(std::int64_t b, std::int64_t s) const
    {
        return link_.latency + opt_.precision_bytes * static_cast<double>(b) * static_cast<double>(s) *
                                   static_cast<double>(model_.hidden) / link_rate();
    }

    //! Weight elements of one layer on one tensor-parallel rank (the four GEMMs).
    double weights_per_layer() const
    {
        double w = 0;
        for (const auto& [k, n] : linear_shapes()) w += k * n;
        return w;
    }
    //! Seconds of `grad += dW` per layer and unit (calibrated form; 0 for the roofline).
    double accumulation_seconds() const
    {
        if (opt_.form == analytic_form::roofline) return 0;
        return memory(3.0 * opt_.gradient_bytes * weights_per_layer());
    }
    //! Fraction of the SMs' tile slots a GEMM with a rows x cols output fills (1 without quantisation).
    double wave_utilisation(double rows, double cols) const
    {
        if (opt_.form == analytic_form::roofline || device_.sm_count == 0) return 1;
        const double t = device_.gemm_tile;
        const double tiles = std::ceil(rows / t) * std::ceil(cols / t);
        const double waves = std::ceil(tiles / device_.sm_count);
        return rows * cols / (waves * device_.sm_count * t * t);
    }
    //! The link's achieved bytes/s between stages.
    double link_rate() const
    {
        return opt_.form == analytic_form::roofline ? link_.bandwidth : link_.bandwidth * link_.efficiency;
    }

    //! Every number the model uses, inputs and derived, for listings ("say what was used");
    //! the form itself is settings().form.
    std::vector<model_parameter> parameters() const
    {
        const bool cal = opt_.form == analytic_form::calibrated;
        std::vector<model_parameter> out{
            {"layers per stage", static_cast<double>(layers_per_stage_), ""},
            {"tensor parallel", static_cast<double>(opt_.tensor_parallel), ""},
            {"precision", static_cast<double>(opt_.precision_bytes), "bytes"},
            {"device peak", device_.peak_flops, "FLOP/s"},
            {"device memory bandwidth", device_.memory_bandwidth, "B/s"},
            {"device intra-node bandwidth", device_.intra_node_bandwidth, "B/s"},
            {"matmul efficiency", device_.matmul_efficiency, ""},
            {"memory efficiency", device_.memory_efficiency, ""},
            {"kernel overhead", device_.kernel_overhead, "s"},
            {"link bandwidth", link_.bandwidth, "B/s"},
            {"link latency", link_.latency, "s"},
        };
        if (cal) {
            out.push_back({"SMs", static_cast<double>(device_.sm_count), ""});
            out.push_back({"GEMM tile", static_cast<double>(device_.gemm_tile), "rows"});
            out.push_back({"all-reduce latency", device_.all_reduce_latency, "s"});
            out.push_back({"host op overhead", device_.host_op_overhead, "s"});
            out.push_back({"link efficiency", link_.efficiency, ""});
            out.push_back({"gradient precision", static_cast<double>(opt_.gradient_bytes), "bytes"});
        }
        out.push_back({"achieved GEMM rate (large)", device_.peak_flops * device_.matmul_efficiency, "FLOP/s"});
        out.push_back({"achieved memory rate", device_.memory_bandwidth * device_.memory_efficiency, "B/s"});
        out.push_back({"achieved link rate", link_rate(), "B/s"});
        out.push_back({"weights per rank and stage", opt_.precision_bytes * weights_per_layer() * layers_per_stage_, "B"});
        if (cal) {
            out.push_back({"grad accumulation per unit", accumulation_seconds() * layers_per_stage_, "s"});
            out.push_back({"host floor per unit", ops_per_layer * device_.host_op_overhead * layers_per_stage_, "s"});
        }
        return out;
    }

private:
    static bool positive(double v) { return std::isfinite(v) && v > 0; }
    static bool non_negative(double v) { return std::isfinite(v) && v >= 0; }
    static bool fraction(double v) { return v > 0 && v <= 1; }
    double tp() const { return opt_.tensor_parallel; }
    double vocab_per_rank() const { return static_cast<double>(model_.vocab) / tp(); }
    //! (k, n) of the four GEMMs of a layer, Megatron-split: QKV and fc1 by columns, out-proj and fc2 by rows.
    std::array<std::pair<double, double>, 4> linear_shapes() const
    {
        const double H = static_cast<double>(model_.hidden);
        return {{{H, 3 * H / tp()}, {H / tp(), H}, {H, 4 * H / tp()}, {4 * H / tp(), H}}};
    }
    //! A ring all-reduce of the m x H activation moves 2 (tp-1)/tp of it per rank.
    double all_reduce_bytes(double m) const
    {
        return 2 * (tp() - 1) / tp() * opt_.precision_bytes * m * static_cast<double>(model_.hidden);
    }
    double memory(double bytes) const { return bytes * seconds_per_byte_; }
    double roof(double flops, double bytes) const { return std::max(flops * seconds_per_flop_, memory(bytes)); }
    //! (m x k) * (k x n) with an out_rows x out_cols output: reads both operands, writes the product.
    double gemm(double m, double k, double n, double out_rows, double out_cols) const
    {
        return std::max(2 * m * k * n * seconds_per_flop_ / wave_utilisation(out_rows, out_cols),
                        memory(opt_.precision_bytes * (m * k + k * n + m * n)));
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
