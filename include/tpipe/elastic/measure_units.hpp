#pragma once
// The elastic planner's unit times (driver_options::measured) for any freezable_model: the
// model builds one stage per unit, and one batch goes through them in order, a one-row
// microbatch per sample, forward then backward, each stage timed on its own; then the batch as
// one microbatch (what a microbatch pays whatever its rows); then its optimizer step, which
// step_prices.hpp apportions to the units with the gradients' all-reduce. Nothing here knows
// the model: the reference GPT is timed with it too (apps/gpt: elastic_gpt.cpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/elastic/freezable_model.hpp"
#include "tpipe/elastic/step_prices.hpp"
#include "tpipe/exec/gradients.hpp"

namespace tpipe::elastic {

struct measure_options {
    std::int64_t seq_len = 1;  //!< tokens per sample (the unit covers all of them)
    int repeats = 11;          //!< the median of this many passes: one preemption must not decide
    int threads = 1;           //!< stage_request::threads, as the driver will build each stage
    bool step = true;          //!< also price the optimizer step and the all-reduce (steps the model)
};

//! Seconds per sample of each unit's forward and backward on `model`, and the fixed seconds of
//! each microbatch (unit_seconds::forward_fixed, backward_fixed): the model becomes a pipeline of
//! one stage per unit and runs the samples `ids` `repeats` times as one-row microbatches, all in
//! flight, then `repeats` times as one microbatch of them all. With `o.step`, also
//! unit_seconds::update and ::reduce: the median of `repeats` optimizer steps
//! (model.optimizer_step(), on the gradients the passes left), apportioned by each unit's
//! gradient values (its stage's gradients()), and their all-reduce. Use a scratch replica: its
//! weights, gradients and step state are what the passes leave.
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
    using out_t = typename std::remove_cvref_t<decltype(io.output_grad)>::result_type;
    if (!io.source || (!io.output_grad && !std::is_default_constructible_v<out_t>))
        throw invalid_argument("measure_units: the model's io() needs a source, and an output_grad where the last stage's "
                               "output is not default-constructible (the loss's "
                               "gradient seeds the backward)");

    // Each sample is a one-row microbatch, all in flight: a unit runs the rows' forwards in
    // order, and (from the last unit back) their backwards in reverse, as GPipe holds them, so
    // that its activations and gradients compete for the cache as in a pipeline. (Timed on one
    // warm row, the reference GPT's layers ran 12 % faster than in its runs: docs/elastic.md.)
    using clock = std::chrono::steady_clock;
    // The backward's seed, as tpipe::run makes it: the loss's gradient, or Out{} where the last
    // stage computes its own loss (io.output_grad left out).
    auto seed = [&](const unit& u, out_t&& y) -> out_t {
        if (io.output_grad) return io.output_grad(u, std::move(y));
        if constexpr (std::is_default_constructible_v<out_t>) return out_t{};
        else throw invalid_argument("measure_units: no output_grad");  // refused above
    };
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
        std::vector<out_t> gs;
        for (std::int64_t r = 0; r < rows; ++r) gs.push_back(seed(row(r), std::move(xs[static_cast<std::size_t>(r)])));
        for (int s = units - 1; s >= 0; --s) {
            stage_t& st = pipe.stage(static_cast<std::size_t>(s));
            const auto t0 = clock::now();
            for (std::int64_t r = rows - 1; r >= 0; --r)
                gs[static_cast<std::size_t>(r)] = st.backward(row(r), std::move(gs[static_cast<std::size_t>(r)]));
            bwd[static_cast<std::size_t>(s)].push_back(std::chrono::duration<double>(clock::now() - t0).count());
        }
        (void)model.finish_step();
    }
    // Then the whole batch as one microbatch: with the rows one at a time, two points of a
    // microbatch's cost, fixed + rows * per sample.
    std::vector<std::vector<double>> fwd_all(fwd.size()), bwd_all(fwd.size());
    const unit all{.microbatch = 0, .slice = 0, .row_begin = 0, .row_end = rows, .token_begin = 0, .token_end = o.seq_len};
    for (int rep = 0; rows > 1 && rep < o.repeats; ++rep) {
        model.begin_step(ids, {});
        auto x = io.source(all);
        for (int s = 0; s < units; ++s) {
            const auto t0 = clock::now();
            x = pipe.stage(static_cast<std::size_t>(s)).forward(all, std::move(x));
            fwd_all[static_cast<std::size_t>(s)].push_back(std::chrono::duration<double>(clock::now() - t0).count());
        }
        auto g = seed(all, std::move(x));
        for (int s = units - 1; s >= 0; --s) {
            const auto t0 = clock::now();
            g = pipe.stage(static_cast<std::size_t>(s)).backward(all, std::move(g));
            bwd_all[static_cast<std::size_t>(s)].push_back(std::chrono::duration<double>(clock::now() - t0).count());
        }
        (void)model.finish_step();
    }
    auto median = [](std::vector<double>& v) {
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
        return v[v.size() / 2];
    };
    unit_seconds out;
    // one: a one-row microbatch's seconds; whole: the batch's in one microbatch. The line through
    // both gives the fixed part and the per-sample slope; where it does not fit (rows together
    // cost more than one at a time: caches), a microbatch is priced per sample, at `one`.
    auto fit = [&](double one, std::vector<double>& whole_times, std::vector<double>& slope, std::vector<double>& fixed) {
        double per = one, at_once = 0;
        if (rows > 1) {
            const double whole = median(whole_times);
            per = std::max(0.0, (whole - one) / static_cast<double>(rows - 1));
            at_once = one - per;
            if (at_once < 0) per = one, at_once = 0;
        }
        slope.push_back(per);
        fixed.push_back(at_once);
    };
    for (std::size_t s = 0; s < fwd.size(); ++s) {
        fit(median(fwd[s]) / static_cast<double>(rows), fwd_all[s], out.forward, out.forward_fixed);
        fit(median(bwd[s]) / static_cast<double>(rows), bwd_all[s], out.backward, out.backward_fixed);
    }
    if (!o.step) return out;
    std::vector<std::size_t> parameters;  // per unit: the values its stage's gradients hold
    for (int s = 0; s < units; ++s) {
        const gradient_view g = gradients_of(pipe.stage(static_cast<std::size_t>(s)));
        std::size_t n = 0;
        for (auto span : g.f32) n += span.size();
        for (auto span : g.f64) n += span.size();
        parameters.push_back(n);
    }
    std::vector<double> steps;
    for (int rep = 0; rep < o.repeats; ++rep) {
        const auto t0 = clock::now();
        model.optimizer_step();
        steps.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    }
    price_step(out, parameters, median(steps));
    return out;
}

} // namespace tpipe::elastic
