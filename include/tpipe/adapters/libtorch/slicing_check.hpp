#pragma once
// check_token_slicing: whether a model cut into stages gives the same outputs run in token
// slices as unsliced, stage by stage. A model that was not prepared for token slices (positions
// not offset by context_tokens(), attention without a kv_cache) trains silently wrong under a
// token slicer; this finds the first stage where it differs, before training. Part of
// tpipe/adapters/libtorch.hpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/nn.h>

#include "tpipe/adapters/libtorch/cut.hpp"
#include "tpipe/adapters/libtorch/module_stage.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/exec/pipeline.hpp"

namespace tpipe::libtorch {

//! Runs `input` ([rows, tokens, ...]: the first stage's input of a whole microbatch) through the
//! stages without autograd, once as one unit and once in token slices of `lengths` (summing to
//! the tokens), and compares each stage's outputs over every token (dimension 1 of each output
//! must index tokens). Each stage gets the unsliced output of the stage before, so a difference
//! is that stage's own. Throws tpipe::invalid_argument naming the first stage whose outputs
//! differ by more than `tolerance` relative to the largest output. Uses the stages' kv_caches
//! for microbatch 0: run it outside a training step.
inline void check_token_slicing(uniform_pipeline<module_stage>& pipe, torch::Tensor input,
                                const std::vector<std::int64_t>& lengths, double tolerance = 1e-4)
{
    std::int64_t total = 0;
    for (auto l : lengths) {
        if (l < 1) throw tpipe::invalid_argument("check_token_slicing: a slice of " + std::to_string(l) + " tokens");
        total += l;
    }
    if (input.dim() < 2 || input.size(1) != total)
        throw tpipe::invalid_argument("check_token_slicing: the input is " + describe(input) + ", the slices cover " +
                                      std::to_string(total) + " tokens; give [rows, " + std::to_string(total) +
                                      ", ...]");
    const std::int64_t rows = input.size(0);
    for (std::size_t s = 0; s < pipe.size(); ++s) {
        module_stage& stage = pipe.stage(s);
        const unit whole{.microbatch = 0, .slice = 0, .row_begin = 0, .row_end = rows, .token_begin = 0, .token_end = total};
        torch::Tensor full = stage.evaluate(whole, input);
        std::vector<torch::Tensor> parts;
        std::int64_t t0 = 0;
        for (std::size_t k = 0; k < lengths.size(); ++k) {
            const unit u{.microbatch = 0, .slice = static_cast<int>(k), .row_begin = 0, .row_end = rows,
                         .token_begin = t0, .token_end = t0 + lengths[k]};
            parts.push_back(stage.evaluate(u, input.slice(1, t0, t0 + lengths[k])));
            if (parts.back().dim() < 2 || parts.back().size(1) != lengths[k])
                throw tpipe::invalid_argument("check_token_slicing: " + stage.name() + " gave " +
                                              describe(parts.back()) + " for a slice of " +
                                              std::to_string(lengths[k]) +
                                              " tokens; the check needs outputs [rows, tokens, ...]");
            t0 += lengths[k];
        }
        const torch::Tensor sliced = torch::cat(parts, 1);
        if (!sliced.sizes().equals(full.sizes()))
            throw tpipe::invalid_argument(stage.name() + " gives " + describe(full) + " unsliced but " +
                                          describe(sliced) + " in token slices");
        const auto diff = (sliced.to(torch::kDouble) - full.to(torch::kDouble)).abs();
        const double worst = diff.max().item<double>();
        const double scale = std::max(1.0, full.to(torch::kDouble).abs().max().item<double>());
        if (!(worst <= tolerance * scale)) {
            const auto per_token = diff.amax(0).reshape({total, -1}).amax(1);  // [tokens]
            const std::int64_t at = (per_token > tolerance * scale).nonzero()[0][0].item<std::int64_t>();
            throw tpipe::invalid_argument(
                stage.name() + " gives different outputs in token slices than unsliced, from token " +
                std::to_string(at) + " on (|difference| up to " + std::to_string(worst) + ", outputs up to " +
                std::to_string(scale) + "); a token-sliced stage must offset positions by context_tokens() and "
                "attend to earlier slices' keys and values through a tpipe::libtorch::kv_cache (docs/libtorch.md, "
                "'Token slices'), or be trained without a token slicer");
        }
        input = full;
    }
}

} // namespace tpipe::libtorch
