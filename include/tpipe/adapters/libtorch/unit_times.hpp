#pragma once
// The elastic planner's unit times for a torch::nn::Sequential: seconds per sample of each
// module's forward and backward (tpipe::elastic::driver_options::measured), measured on one batch.
// Part of tpipe/adapters/libtorch.hpp.
#include <algorithm>
#include <chrono>
#include <limits>
#include <vector>

#include <torch/torch.h>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/driver_options.hpp"

namespace tpipe::libtorch {

//! Each module of `seq` run on what the modules before it make of `inputs` (rows on dim 0): the
//! best of `repeats` forwards (recording autograd, as a stage does) and backwards (from a
//! gradient of ones), divided by the rows. The model's .grad() are left untouched: the backward
//! is torch::autograd::grad.
inline elastic::unit_seconds measure_units(torch::nn::Sequential& seq, torch::Tensor inputs, int repeats = 3)
{
    if (repeats < 1 || !inputs.defined() || inputs.dim() < 1 || inputs.size(0) < 1)
        throw tpipe::invalid_argument("measure_units: needs a batch with rows on dim 0 and repeats >= 1");
    using clock = std::chrono::steady_clock;
    const double rows = static_cast<double>(inputs.size(0));
    elastic::unit_seconds u;
    torch::Tensor x = std::move(inputs);
    for (auto& m : *seq) {
        std::vector<torch::Tensor> wrt;
        for (const auto& p : m.ptr()->parameters())
            if (p.requires_grad()) wrt.push_back(p);
        torch::Tensor in = x.is_floating_point() ? x.detach().requires_grad_() : x;
        if (in.requires_grad()) wrt.push_back(in);
        double fwd = std::numeric_limits<double>::infinity(), bwd = fwd;
        torch::Tensor y;
        for (int r = 0; r < repeats; ++r) {
            const auto t0 = clock::now();
            y = m.forward<torch::Tensor>(in);
            const auto t1 = clock::now();
            if (!wrt.empty() && y.requires_grad())
                torch::autograd::grad({y}, wrt, {torch::ones_like(y)}, /*retain_graph=*/false, /*create_graph=*/false,
                                      /*allow_unused=*/true);
            const auto t2 = clock::now();
            fwd = std::min(fwd, std::chrono::duration<double>(t1 - t0).count());
            bwd = std::min(bwd, std::chrono::duration<double>(t2 - t1).count());
        }
        u.forward.push_back(fwd / rows);
        u.backward.push_back(bwd / rows);
        x = y.detach();
    }
    return u;
}

} // namespace tpipe::libtorch
