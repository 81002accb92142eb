#pragma once
// Memory of one pipeline stage on one tensor-parallel rank, from the transformer's shape.
//
// Static (for the whole iteration), per parameter on the rank:
//     weight_bytes + gradient_bytes + master_bytes + optimizer_bytes
// The defaults are mixed-precision Adam as TeraPipe runs it (docs/papers.md 3.4): fp16
// weights (2) and fp16 gradients (2), an fp32 master copy (4) and Adam's two fp32 moments (8):
// 16 bytes per parameter. Parameters per layer and rank are Megatron's split of the four GEMMs
// (12 H^2 / tp) with their biases, and two layer norms (4 H); the stage that holds the
// embedding adds (vocab + seq_len) x H / tp.
//
// Saved activations of one unit of b rows, s tokens and c tokens of context, per layer
// (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
// eq. 2, no sequence parallelism, no recomputation):
//     b s H (10 + 24 / tp) bytes  +  5 bytes x (heads / tp) x b x s x (c + s)   (attention scores)
// The second term is eq. 2's 5 a s^2 b with the slice's s queries over its c + s keys.
//
// K/V buffers (TeraPipe's cache, docs/papers.md 3.5): every microbatch in flight keeps a
// full-length K and V of b x L x H / tp elements per layer from its first forward to its last
// backward, and the microbatch being back-propagated has a K/V gradient buffer of the same size
// (later slices add their gradient into earlier K/V). This counts the slice's own K and V,
// already inside eq. 2's 24/tp term, a second time: a conservative overestimate.
//
// Activation recomputation (`recompute`): a unit keeps only its stage input (b s H x
// input_bytes) from its forward to its backward, which recomputes the stage's forward first; the
// K/V cache is kept (earlier tokens' context is not recomputed). At the peak one unit's full
// activations are alive again: the largest unit's, counted once.
//
// A fixed floor per process (`floor_bytes`): what a process holds before any model state: its
// baseline RSS (binary, libraries, allocator), thread stacks and BLAS buffers. Measured, not
// derived (docs/memory.md); 0 by default.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/schedule/action.hpp"
#include "tpipe/slice/scheme.hpp"

namespace tpipe {

struct memory_options {
    double weight_bytes = 2;          //!< per parameter: fp16 weights
    double gradient_bytes = 2;        //!< per parameter: fp16 .grad
    double master_bytes = 4;          //!< per parameter: fp32 master weights
    double optimizer_bytes = 8;       //!< per parameter: Adam's m and v in fp32
    double activation_bytes = 10;     //!< per layer, token and hidden unit, not split by tensor parallelism
    double split_activation_bytes = 24; //!< per layer, token and hidden unit, divided by tp
    double score_bytes = 5;           //!< per attention score (query x key x head): scores, softmax, dropout mask
    double cache_bytes = 2;           //!< per K/V element (fp16)
    bool embedding = true;            //!< the stage holds the embedding (the first stage, also the fullest)
    bool recompute = false;           //!< keep only each unit's stage input; recompute its forward in the backward
    double input_bytes = 2;           //!< per token and hidden unit of a unit's stage input, kept under recompute
    double floor_bytes = 0;           //!< per process: baseline RSS, thread stacks, BLAS buffers (measured)

    double bytes_per_parameter() const { return weight_bytes + gradient_bytes + master_bytes + optimizer_bytes; }
};

//! Bytes with a binary or decimal suffix, e.g. "80GiB", "14GB", "512MiB", "1e9": refuses anything else.
inline double parse_bytes(const std::string& text)
{
    static const std::map<std::string, double> suffixes{
        {"", 1},          {"B", 1},           {"KB", 1e3},  {"MB", 1e6},  {"GB", 1e9},  {"TB", 1e12},
        {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(text, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    const auto it = used ? suffixes.find(text.substr(used)) : suffixes.end();
    detail::require(it != suffixes.end() && std::isfinite(v) && v > 0,
                    "memory size \"" + text + "\": expected a positive number of bytes with an optional suffix "
                    "B, KB, MB, GB, TB, KiB, MiB, GiB or TiB, e.g. 80GiB or 14GB");
    return v * it->second;
}

class memory_model {
public:
    //! `layers` on the stage (the fullest: ceil(layers / stages)), sequences of `seq_len` tokens.
    memory_model(transformer_shape shape, int layers, int tensor_parallel, std::int64_t seq_len, memory_options opt = {})
        : shape_(shape), layers_(layers), tp_(tensor_parallel), seq_len_(seq_len), opt_(opt)
    {
        detail::require(layers_ >= 1 && seq_len_ >= 1, "memory model: layers and seq_len must be >= 1");
        detail::require(tp_ >= 1 && shape_.heads % tp_ == 0 && shape_.hidden % tp_ == 0,
                        "memory model: tensor parallel " + std::to_string(tp_) + " must divide heads " +
                            std::to_string(shape_.heads) + " and hidden " + std::to_string(shape_.hidden));
    }
    //! The memory of the stage an analytic latency model prices (its layers and tensor parallelism).
    memory_model(const analytic_latency& m, std::int64_t seq_len, memory_options opt = {})
        : memory_model(m.model(), m.layers_per_stage(), m.settings().tensor_parallel, seq_len, opt)
    {
    }

    const memory_options& options() const { return opt_; }
    int layers() const { return layers_; }

    double parameters() const
    {
        const double H = static_cast<double>(shape_.hidden), t = tp_;
        const double per_layer = 12 * H * H / t + (3 * H / t + H + 4 * H / t + H) + 4 * H;
        const double embedding = opt_.embedding ? static_cast<double>(shape_.vocab + seq_len_) * H / t : 0;
        return layers_ * per_layer + embedding;
    }
    //! Weights, gradients, master weights and optimizer state, and the process's fixed floor.
    double static_bytes() const { return parameters() * opt_.bytes_per_parameter() + opt_.floor_bytes; }

    //! Activations one unit keeps from its forward to its backward on this stage: every layer's
    //! (full_unit_bytes), or under recompute only its stage input.
    double unit_bytes(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        if (opt_.recompute)
            return static_cast<double>(b) * static_cast<double>(s) * static_cast<double>(shape_.hidden) / tp_ *
                   opt_.input_bytes;
        return full_unit_bytes(b, s, c);
    }
    //! Saved activations of one unit on this stage, every layer's (without recomputation).
    double full_unit_bytes(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        const double B = static_cast<double>(b), S = static_cast<double>(s), C = static_cast<double>(c);
        const double H = static_cast<double>(shape_.hidden), t = tp_;
        const double linear = B * S * H * (opt_.activation_bytes + opt_.split_activation_bytes / t);
        const double scores = opt_.score_bytes * (shape_.heads / t) * B * S * (C + S);
        return layers_ * (linear + scores);
    }
    //! Full-length K and V of a microbatch of b rows (the same size again for its gradient).
    double kv_bytes(std::int64_t b) const
    {
        return layers_ * 2.0 * static_cast<double>(b) * static_cast<double>(seq_len_) *
               static_cast<double>(shape_.hidden) / tp_ * opt_.cache_bytes;
    }

    //! Activation bytes with every unit of `units` alive at once (GPipe's first stage, and the
    //! schedule the slicing DP's objective prices): all units, every microbatch's K/V, and one
    //! K/V gradient of the largest microbatch.
    double all_alive_bytes(const scheme& units) const
    {
        double bytes = 0, largest = 0, transient = 0;
        for (int m = 0; m < units.microbatches(); ++m) {
            const auto rows = units.at(m, 0).rows();
            bytes += kv_bytes(rows);
            largest = std::max(largest, kv_bytes(rows));
        }
        for (int i = 0; i < units.units(); ++i) {
            const unit u = units.at(i);
            bytes += unit_bytes(u.rows(), u.tokens(), u.context());
            if (opt_.recompute) transient = std::max(transient, full_unit_bytes(u.rows(), u.tokens(), u.context()));
        }
        return bytes + largest + transient;
    }

    //! Activation bytes at the peak of one stage running `actions`, its compute actions in
    //! execution order (a rank's list filtered to the stage, or a simulation's events of one
    //! rank), where all_alive_bytes assumes every unit alive: a unit's activations live from its
    //! F to its B, or to its W under the split backward (I frees nothing: the weight gradient
    //! reads them); a microbatch's K/V from its first F to its last backward, and its K/V
    //! gradient from its first backward on. With recompute, a unit's backward holds its full
    //! activations again while it runs.
    double peak_alive_bytes(const scheme& units, const std::vector<action>& actions) const
    {
        std::vector<int> forwards(static_cast<std::size_t>(units.microbatches()), 0), backwards = forwards;
        double bytes = 0, peak = 0;
        for (const action& a : actions) {
            if (!is_compute(a.kind) || a.kind == op::I) continue;
            const unit u = units.at(a.microbatch, a.slice);
            const auto m = static_cast<std::size_t>(a.microbatch);
            const double kv = kv_bytes(u.rows()), own = unit_bytes(u.rows(), u.tokens(), u.context());
            if (a.kind == op::F) {
                bytes += own + (forwards[m]++ == 0 ? kv : 0);
            } else {
                if (backwards[m]++ == 0) bytes += kv;  // its K/V gradient
                const double again = opt_.recompute ? full_unit_bytes(u.rows(), u.tokens(), u.context()) : 0;
                peak = std::max(peak, bytes + again);
                bytes -= own;
                if (backwards[m] == units.slices(a.microbatch)) bytes -= 2 * kv;
            }
            peak = std::max(peak, bytes);
        }
        return peak;
    }

    //! The least all_alive_bytes of any plan of `batch` rows at granularity g: microbatches of
    //! one row (the smallest K/V gradient; the rest is linear in rows) and slices of g tokens
    //! (the fewest attention scores).
    double least_all_alive_bytes(std::int64_t batch, std::int64_t g) const
    {
        double one_row = kv_bytes(1), transient = 0;
        for (std::int64_t c = 0; c < seq_len_; c += g) {
            one_row += unit_bytes(1, g, c);
            if (opt_.recompute) transient = std::max(transient, full_unit_bytes(1, g, c));
        }
        return static_cast<double>(batch) * one_row + kv_bytes(1) + transient;
    }

private:
    transformer_shape shape_;
    int layers_;
    int tp_;
    std::int64_t seq_len_;
    memory_options opt_;
};

} // namespace tpipe
