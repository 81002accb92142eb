#pragma once
// The elastic planner's unit times for a torch::nn::Sequential: seconds per sample of each
// module's forward and backward (tpipe::elastic::driver_options::measured), measured on one
// batch; and, for TeraPipe slices inside the elastic pipeline, each module's token latency table
// (driver_options::slicing). Part of tpipe/adapters/libtorch.hpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "tpipe/adapters/libtorch/module_stage.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/plan/profiler.hpp"
#include "tpipe/plan/table_latency.hpp"

namespace tpipe::libtorch {

//! Each module of `seq` run on what the modules before it make of `inputs` (rows on dim 0), each
//! row a one-row microbatch, all in flight: the rows' forwards in order (recording autograd, as a
//! stage does), then their backwards in reverse (from a gradient of ones), as GPipe holds them.
//! That prices what a run of one-row microbatches pays: libtorch's per-operator cost, which a
//! whole batch at once spreads over its rows, and the cache that the rows in flight share. The
//! best of `repeats`, divided by the rows. The model's .grad() are left untouched: the backward
//! is torch::autograd::grad.
inline elastic::unit_seconds measure_units(torch::nn::Sequential& seq, torch::Tensor inputs, int repeats = 3)
{
    if (repeats < 1 || !inputs.defined() || inputs.dim() < 1 || inputs.size(0) < 1)
        throw tpipe::invalid_argument("measure_units: needs a batch with rows on dim 0 and repeats >= 1");
    using clock = std::chrono::steady_clock;
    const std::int64_t rows = inputs.size(0);
    elastic::unit_seconds u;
    std::vector<torch::Tensor> xs;  // each row, through the modules so far
    for (std::int64_t r = 0; r < rows; ++r) xs.push_back(inputs.slice(0, r, r + 1));
    for (auto& m : *seq) {
        std::vector<torch::Tensor> params;
        for (const auto& p : m.ptr()->parameters())
            if (p.requires_grad()) params.push_back(p);
        double fwd = std::numeric_limits<double>::infinity(), bwd = fwd;
        std::vector<torch::Tensor> ys(xs.size());
        for (int rep = 0; rep < repeats; ++rep) {
            std::vector<torch::Tensor> ins;
            for (const auto& x : xs) ins.push_back(x.is_floating_point() ? x.detach().requires_grad_() : x);
            const auto t0 = clock::now();
            for (std::size_t r = 0; r < ins.size(); ++r) ys[r] = m.forward<torch::Tensor>(ins[r]);
            const auto t1 = clock::now();
            for (std::size_t r = ins.size(); r-- > 0;) {
                std::vector<torch::Tensor> wrt = params;
                if (ins[r].requires_grad()) wrt.push_back(ins[r]);
                if (!wrt.empty() && ys[r].requires_grad())
                    torch::autograd::grad({ys[r]}, wrt, {torch::ones_like(ys[r])}, /*retain_graph=*/false,
                                          /*create_graph=*/false, /*allow_unused=*/true);
            }
            const auto t2 = clock::now();
            fwd = std::min(fwd, std::chrono::duration<double>(t1 - t0).count());
            bwd = std::min(bwd, std::chrono::duration<double>(t2 - t1).count());
        }
        u.forward.push_back(fwd / static_cast<double>(rows));
        u.backward.push_back(bwd / static_cast<double>(rows));
        for (std::size_t r = 0; r < xs.size(); ++r) xs[r] = ys[r].detach();
    }
    return u;
}

//! Each module of `seq` profiled over `grid` as a one-module stage runs a token slice: forward
//! and backward of b rows x s tokens after c context tokens, whose keys and values (kv_cache)
//! an untimed forward of the c tokens leaves, on what the modules before make of `inputs` (rows
//! on dim 0, tokens on dim 1, as many as the grid's longest s + c). The modules' .grad() are left
//! as none afterwards.
inline std::vector<table_latency> profile_units(torch::nn::Sequential& seq, torch::Tensor inputs,
                                                const profile_grid& grid,
                                                profile_options opts = {.warmup = 1, .repeats = 3})
{
    if (!inputs.defined() || inputs.dim() < 2)
        throw tpipe::invalid_argument("profile_units: needs inputs with rows on dim 0 and tokens on dim 1");
    std::vector<table_latency> out;
    torch::Tensor x = std::move(inputs);  // the whole sequences, through the modules so far
    std::size_t m = 0;
    for (auto& any : *seq) {
        std::vector<torch::Tensor> params;
        for (const auto& p : any.ptr()->parameters())
            if (p.requires_grad()) params.push_back(p);
        module_stage stage([&any](torch::Tensor t) { return any.forward<torch::Tensor>(std::move(t)); }, params,
                           "profiled module " + std::to_string(m++));
        auto part = [&](std::int64_t b, std::int64_t t0, std::int64_t t1) { return x.slice(0, 0, b).slice(1, t0, t1); };
        std::optional<unit> context;  // the earlier slice of the last call, whose backward is due
        torch::Tensor context_out;
        auto settle = [&] {
            if (context) stage.backward(*context, torch::ones_like(context_out));
            context.reset();
        };
        auto setup = [&](std::int64_t b, std::int64_t, std::int64_t c) {
            settle();
            if (c == 0) return;
            context = unit{.microbatch = 0, .slice = 0, .row_begin = 0, .row_end = b, .token_begin = 0, .token_end = c};
            context_out = stage.forward(*context, part(b, 0, c));
        };
        auto fn = [&](std::int64_t b, std::int64_t s, std::int64_t c) {
            const unit u{.microbatch = 0, .slice = c > 0 ? 1 : 0, .row_begin = 0, .row_end = b, .token_begin = c,
                         .token_end = c + s};
            const torch::Tensor y = stage.forward(u, part(b, c, c + s));
            stage.backward(u, torch::ones_like(y));
        };
        out.emplace_back(measure(fn, grid, opts, setup));
        settle();
        for (auto& p : params) p.mutable_grad() = torch::Tensor();
        const torch::NoGradGuard no_grad;
        x = any.forward<torch::Tensor>(x);
    }
    return out;
}

} // namespace tpipe::libtorch
