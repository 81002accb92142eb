#pragma once
// One pipeline iteration of a shape, priced for tpipe's simulator: per stage, forward and
// backward seconds per sample, a fixed cost per microbatch compute (kernel launches, Python),
// and the activation transfer between neighbouring stages. A microbatch of a batch of B
// samples split M ways carries B / M samples (fractional when M does not divide B: the
// simulator prices the average microbatch).
//
// A pipeline latency model turns (cuts, frozen units) into stage_times; AutoPipe and the
// elastic plan price every candidate shape through it and the simulator, nothing else.
#include <algorithm>
#include <concepts>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/schedule/gpipe.hpp"
#include "tpipe/schedule/one_f_one_b.hpp"
#include "tpipe/sim/costs.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe::elastic {

struct stage_times {
    std::vector<double> forward;   //!< per stage, seconds per sample (frozen units included)
    std::vector<double> backward;  //!< per stage, seconds per sample (active units only)
    double per_microbatch = 0;     //!< fixed seconds per forward or backward compute
    double transfer = 0;           //!< seconds per sample sent between neighbouring stages
    double latency = 0;            //!< fixed seconds per transfer
    std::vector<double> after;     //!< per stage, seconds after the last backward (gradient all-reduce)
    std::vector<double> forward_fixed, backward_fixed;  //!< per stage, added to per_microbatch (empty: none)

    int stages() const { return static_cast<int>(forward.size()); }
};

//! The simulator's cost model for microbatches of `samples` samples each.
struct microbatch_costs {
    const stage_times& t;
    double samples = 1;

    double compute(op kind, int stage, const unit&) const
    {
        const auto s = static_cast<std::size_t>(stage);
        const auto fixed = [s](const std::vector<double>& v) { return v.empty() ? 0.0 : v[s]; };
        if (kind == op::F) return t.per_microbatch + fixed(t.forward_fixed) + t.forward[s] * samples;
        if (kind == op::B) return t.per_microbatch + fixed(t.backward_fixed) + t.backward[s] * samples;
        return 0;
    }
    double transfer(op, int, int, const unit&) const { return t.latency + t.transfer * samples; }
};
static_assert(cost_model<microbatch_costs>);

//! The schedule a pipeline iteration runs: GPipe (all forwards, then all backwards; what the
//! paper's PyTorch Pipe runs) or 1F1B (same bubble, but a stage's steady state is F + B, so a
//! forward-heavy stage holding the frozen prefix costs what its total says).
enum class pipeline_schedule { gpipe, one_f_one_b };

//! A model that prices a shape: stage_times for these cuts with the first `frozen` units frozen.
template <class M>
concept pipeline_latency = requires(const M& m, std::span<const int> cuts, int frozen) {
    { m.stage_times(cuts, frozen) } -> std::convertible_to<stage_times>;
};

//! Seconds of one iteration of `batch` samples in `microbatches` microbatches, simulated, plus
//! the slowest stage's after-backward work (the all-reduce waits for the last backward).
inline double simulate_iteration(const stage_times& t, double batch, int microbatches,
                                 pipeline_schedule schedule = pipeline_schedule::gpipe)
{
    detail::require(t.stages() >= 1 && t.backward.size() == t.forward.size(),
                    "stage_times: forward and backward must have one entry per stage");
    detail::require(batch > 0, "simulate_iteration: batch must be > 0 samples");
    detail::require(microbatches >= 1, "simulate_iteration: microbatches must be >= 1, got " +
                                           std::to_string(microbatches));
    const topology top{t.stages()};
    const program p = schedule == pipeline_schedule::gpipe ? gpipe{}.program(top, tpipe::microbatches(microbatches))
                                                           : one_f_one_b{}.program(top, tpipe::microbatches(microbatches));
    const double makespan = simulate(p, microbatch_costs{t, batch / microbatches}).makespan;
    double tail = 0;
    for (double a : t.after) tail = std::max(tail, a);
    return makespan + tail;
}

struct microbatch_choice {
    int microbatches = 1;
    double iteration_seconds = 0;
};

//! The microbatch count in [K, factor K] (and <= batch) with the shortest simulated iteration;
//! the paper profiles the same range once per pipeline length. Counts the model times alike
//! (one stage: every count; equal up to rounding) go to the fewest: each microbatch has a fixed
//! cost per stage that per-sample times do not price.
inline microbatch_choice choose_microbatches(const stage_times& t, int batch, int factor = 6,
                                             pipeline_schedule schedule = pipeline_schedule::gpipe)
{
    detail::require(batch >= 1, "choose_microbatches: batch must be >= 1 sample, got " + std::to_string(batch));
    detail::require(factor >= 1, "choose_microbatches: factor must be >= 1, got " + std::to_string(factor));
    const int k = t.stages();
    microbatch_choice best{0, std::numeric_limits<double>::infinity()};
    for (int m = std::min(k, batch); m <= std::min(factor * k, batch); ++m) {
        const double s = simulate_iteration(t, batch, m, schedule);
        if (s < best.iteration_seconds * (1 - 1e-9)) best = {m, s};
    }
    return best;
}

} // namespace tpipe::elastic
