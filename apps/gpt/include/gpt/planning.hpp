#pragma once
// TeraPipe planning for the reference GPT: profile each pipeline part's forward + backward time
// t(b, s, c) with tpipe's profiler, take the slowest part at every point (the planner's stages
// are identical by assumption), and let tpipe's slicing DP choose rows x token cuts.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <tpipe/plan/profiler.hpp>
#include <tpipe/plan/slicing_dp.hpp>

#include "gpt/pipeline.hpp"

namespace gpt {

//! The slowest of several per-part latency models (a tpipe latency_model). Context never makes
//! a unit cheaper, so each part's time is at least its context-free time t(b, s, 0): a fitted
//! context term that dips below zero on noisy profiles cannot produce a negative unit time.
struct slowest_part_latency {
    std::vector<tpipe::table_latency> parts;
    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        double t = 0;
        for (const auto& p : parts) t = std::max({t, p.seconds(b, s, c), p.seconds(b, s, 0)});
        return t;
    }
};

//! Profiles every part of `model` (forward + backward_input + backward_weight of one unit with
//! the given context, on the part's own thread pool) using the rows and tokens of `b`.
//! Gradients written while profiling are cleared afterwards.
template <class T>
slowest_part_latency profile_parts(pipelined_model<T>& model, const batch& b, const tpipe::profile_grid& grid,
                                   tpipe::profile_options opts = {.warmup = 2, .repeats = 5})
{
    slowest_part_latency out;
    const std::int64_t d = model.params().cfg.d_model;
    for (int i = 0; i < model.stages(); ++i) {
        part<T>& p = model.part_at(i);
        auto fn = [&](std::int64_t rows, std::int64_t s, std::int64_t c) {
            p.begin(&b);
            if (c > 0) p.assume_context(0, 0, rows, c);
            const tpipe::unit u{0, c > 0 ? 1 : 0, 0, rows, c, c + s};
            activation<T> x;
            if (!p.first()) x = activation<T>{rows, s, std::vector<T>(static_cast<std::size_t>(rows * s * d), T(0))};
            auto y = p.forward(u, std::move(x));
            if (!p.last()) y.data.assign(static_cast<std::size_t>(rows * s * d), T(0));
            p.backward_input(u, std::move(y));
            p.backward_weight(u);
        };
        out.parts.push_back(tpipe::profile(fn, grid, opts));
        p.flush_grad();  // empties the private tied-head accumulator
    }
    model.params().zero_grad();
    return out;
}

} // namespace gpt
