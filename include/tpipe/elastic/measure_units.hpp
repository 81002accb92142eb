#pragma once
// The elastic planner's unit times (driver_options::measured) for any freezable_model: the
// model builds one stage per unit, and one batch goes through them in order, a one-row
// microbatch per sample, forward then backward, each stage timed on its own. Nothing here
// knows the model: a user's model is timed as the reference GPT times itself (apps/gpt:
// elastic_gpt.cpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/elastic/freezable_model.hpp"

namespace tpipe::elastic {

struct measure_options {
    std::int64_t seq_len = 1;  //!< tokens per sample (the unit covers all of them)
    int repeats = 11;          //!< the median of this many passes: one preemption must not decide
    int threads = 1;           //!< stage_request::threads, as the driver will build each stage
};

//! Seconds per sample of each unit's forward and backward on `model`, which becomes a pipeline of
//! one stage per unit and runs the samples `ids` (each a one-row microbatch, all in flight)
//! `repeats` times.
//! Use a scratch replica: its stages, gradients and step state are what the passes leave (no
//! optimizer step runs, so its weights are not). unit_seconds::update is left empty: time the
//! model's optimizer step yourself where it matters (it is optional to the planner).
template <freezable_model M>
unit_seconds measure_units(M& model, std::span<const std::int64_t> ids, const measure_options& o = {})
{
    const std::vector<double> costs = model.unit_costs();
    const int units = static_cast<int>(costs.size());
    if (units < 1) throw invalid_argument("measure_units: the model has no units (unit_costs() is empty)");
    if (ids.empty()) throw invalid_argument("measure_units: needs at least one sample id");
    if (o.seq_len < 1 || o.repeats < 1 || o.threads < 1)
        throw invalid_argument("measure_units: seq_len, repeats and threads must be >= 1, got " +
                               std::to_string(o.seq_len) + ", " + std::to_string(o.repeats) + ", " +
                               std::to_string(o.threads));
    stage_request request{.cuts = {}, .frozen = 0, .threads = o.threads, .here = {}};
    for (int u = 0; u <= units; ++u) request.cuts.push_back(u);
    auto& pipe = model.build(request);
    if (static_cast<int>(pipe.size()) != units)
        throw invalid_argument("measure_units: the model built " + std::to_string(pipe.size()) +
                               " stages for a request of " + std::to_string(units) + " (one per unit)");
    const auto& io = model.io();
    if (!io.source || !io.output_grad)
        throw invalid_argument("measure_units: the model's io() needs a source and an output_grad (the loss's "
                               "gradient seeds the backward)");

    // Each sample is a one-row microbatch, all in flight: a unit runs the rows' forwards in
    // order, and (from the last unit back) their backwards in reverse, as GPipe holds them, so
    // that its activations and gradients compete for the cache as in a pipeline. (Timed on one
    // warm row, the reference GPT's layers ran 12 % faster than in its runs: docs/elastic.md.)
    using clock = std::chrono::steady_clock;
    using stage_t = stage_object_t<typename M::stage_type>;
    const auto rows = static_cast<std::int64_t>(ids.size());
    auto row = [&](std::int64_t r) {
        return unit{.microbatch = static_cast<int>(r), .slice = 0, .row_begin = r, .row_end = r + 1, .token_begin = 0,
                    .token_end = o.seq_len};
    };
    std::vector<std::vector<double>> fwd(static_cast<std::size_t>(units)), bwd(fwd.size());
    for (int rep = 0; rep < o.repeats; ++rep) {
        model.begin_step(ids, {});
        std::vector<decltype(io.source(row(0)))> xs;
        for (std::int64_t r = 0; r < rows; ++r) xs.push_back(io.source(row(r)));
        for (int s = 0; s < units; ++s) {
            stage_t& st = pipe.stage(static_cast<std::size_t>(s));
            const auto t0 = clock::now();
            for (std::int64_t r = 0; r < rows; ++r)
                xs[static_cast<std::size_t>(r)] = st.forward(row(r), std::move(xs[static_cast<std::size_t>(r)]));
            fwd[static_cast<std::size_t>(s)].push_back(std::chrono::duration<double>(clock::now() - t0).count());
        }
        std::vector<decltype(io.output_grad(row(0), std::move(xs[0])))> gs;
        for (std::int64_t r = 0; r < rows; ++r) gs.push_back(io.output_grad(row(r), std::move(xs[static_cast<std::size_t>(r)])));
        for (int s = units - 1; s >= 0; --s) {
            stage_t& st = pipe.stage(static_cast<std::size_t>(s));
            const auto t0 = clock::now();
            for (std::int64_t r = rows - 1; r >= 0; --r)
                gs[static_cast<std::size_t>(r)] = st.backward(row(r), std::move(gs[static_cast<std::size_t>(r)]));
            bwd[static_cast<std::size_t>(s)].push_back(std::chrono::duration<double>(clock::now() - t0).count());
        }
        (void)model.finish_step();
    }
    auto per_sample = [&](std::vector<double>& v) {
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2] / static_cast<double>(rows);
    };
    unit_seconds out;
    for (int s = 0; s < units; ++s) {
        out.forward.push_back(per_sample(fwd[static_cast<std::size_t>(s)]));
        out.backward.push_back(per_sample(bwd[static_cast<std::size_t>(s)]));
    }
    return out;
}

} // namespace tpipe::elastic
