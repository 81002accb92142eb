#pragma once
// What an interval costs beyond its pipeline's steady state, forecast before it runs, so that the
// samples/s the driver prints beside a measurement is the interval's and not only its shape's:
//
// - the frozen prefix's rows that AutoCache does not hold yet. In the first epoch after a freeze
//   every row is computed (nothing cached) or extended (cached at a lower level); later epochs
//   are served from the cache. The forecast replays the epoch sampler's draws (every backend
//   draws from one epoch_sampler of the driver's batch and seed, and every replica finds every
//   entry), so its row counts equal the ones the backends count, row for row;
// - the optimizer step over the active units (unit_seconds::update), once per step: every
//   replica steps its own copy side by side, one updater per replica;
// - with replicas, the all-reduce of the active units' gradients (unit_seconds::reduce), once per
//   step: each stage's starts after its last backward, and the step ends with the slowest.
//
// A resumed run starts with an empty cache, as the forecast does.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/elastic/frozen_outputs.hpp"
#include "tpipe/elastic/sampler.hpp"

namespace tpipe::elastic {

//! One interval's frozen-prefix work: rows by source, and the seconds of the units they run.
struct frozen_work {
    frozen_counters rows;
    double seconds = 0;  //!< over all replicas together (they split it: divide by the replica count)
};

class cache_forecast {
public:
    //! `autocache`: whether the driver caches frozen outputs (without it every row is computed).
    cache_forecast(std::int64_t samples, int batch, std::uint64_t seed, bool autocache)
        : sampler_({.samples = samples, .batch = batch, .seed = seed}), autocache_(autocache),
          level_(static_cast<std::size_t>(samples), 0)
    {
    }

    //! The frozen-prefix work of steps [first, first + steps) with `frozen` units frozen, priced by
    //! `u.forward` (seconds per sample of each unit); the cache then holds what those steps put.
    frozen_work interval(std::int64_t first, std::int64_t steps, int frozen, const unit_seconds& u)
    {
        detail::require(frozen >= 0 && static_cast<std::size_t>(frozen) <= u.forward.size(),
                        "cache_forecast: " + std::to_string(frozen) + " frozen units of " +
                            std::to_string(u.forward.size()) + " measured");
        frozen_work w;
        if (frozen == 0) return w;
        std::vector<double> prefix(static_cast<std::size_t>(frozen) + 1, 0.0);  // forward seconds of units [0, i)
        for (std::size_t i = 0; i < static_cast<std::size_t>(frozen); ++i) prefix[i + 1] = prefix[i] + u.forward[i];
        const auto all = prefix.back();
        for (std::int64_t step = first; step < first + steps; ++step)
            for (std::int64_t id : sampler_.global_batch(step)) {
                int& at = level_[static_cast<std::size_t>(id)];
                if (!autocache_) {
                    ++w.rows.full;
                    w.seconds += all;
                } else if (at == frozen) {
                    ++w.rows.cached;
                } else if (at > 0 && at < frozen) {  // as frozen_outputs: extended from a lower level
                    ++w.rows.extended;
                    w.seconds += all - prefix[static_cast<std::size_t>(at)];
                    at = frozen;
                } else {  // nothing cached, or cached deeper than asked: computed
                    ++w.rows.full;
                    w.seconds += all;
                    if (at == 0) at = frozen;
                }
            }
        return w;
    }

private:
    epoch_sampler sampler_;
    bool autocache_;
    std::vector<int> level_;  //!< per sample: the level AutoCache holds (0: none)
};

//! Seconds of one optimizer step over the units from `frozen` on (none measured: 0).
inline double update_seconds(const unit_seconds& u, int frozen)
{
    double s = 0;
    for (std::size_t i = static_cast<std::size_t>(frozen); i < u.update.size(); ++i) s += u.update[i];
    return s;
}

//! Seconds of one step's gradient all-reduce among `replicas` replicas of a pipeline whose stage s
//! holds units [stage_cuts[s], stage_cuts[s + 1]), all active: the slowest stage's, each unit's
//! measured two-replica time scaled by the ring's 2(r - 1)/r (none measured, or one replica: 0).
inline double reduce_seconds(const unit_seconds& u, std::span<const int> stage_cuts, int replicas)
{
    if (replicas < 2 || u.reduce.empty()) return 0;
    double slowest = 0;
    for (std::size_t s = 0; s + 1 < stage_cuts.size(); ++s) {
        double sum = 0;
        for (int i = stage_cuts[s]; i < stage_cuts[s + 1]; ++i) sum += u.reduce.at(static_cast<std::size_t>(i));
        slowest = std::max(slowest, sum);
    }
    return slowest * 2.0 * (replicas - 1) / replicas;
}

} // namespace tpipe::elastic
