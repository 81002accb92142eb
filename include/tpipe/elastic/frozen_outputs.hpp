#pragma once
// AutoCache in front of a model's frozen prefix: per sample, the output of the frozen units
// [0, F), from the cache when it holds that level, extended from a lower cached level (only the
// units frozen since run), or computed from the sample. A sample's output is the same function
// of its input and the frozen weights either way (the model runs the same per-unit forward on
// the same one-sample input), so a run with the cache equals a run without it bitwise.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/cache.hpp"

namespace tpipe::elastic {

//! Frozen-prefix rows by source: computed from the sample, extended from a lower cached level,
//! served from the cache as they were.
struct frozen_counters {
    std::int64_t full = 0, extended = 0, cached = 0;
    frozen_counters& operator+=(const frozen_counters& x)
    {
        full += x.full;
        extended += x.extended;
        cached += x.cached;
        return *this;
    }
};

//! The frozen prefix's outputs at level `frozen` (>= 1) for the samples `ids`, in that order.
//! `run(i, from, from_level, to_level)` runs the units [from_level, to_level) on sample ids[i],
//! starting from `from` (empty when from_level == 0). `cache` may be null (no AutoCache).
template <byte_payload T, class Run>
    requires std::invocable<Run&, std::size_t, std::optional<T>, int, int> &&
             std::same_as<std::invoke_result_t<Run&, std::size_t, std::optional<T>, int, int>, T>
std::vector<T> frozen_outputs(std::span<const std::int64_t> ids, int frozen, activation_cache<T>* cache, Run&& run,
                              frozen_counters& count)
{
    detail::require(frozen >= 1, "frozen_outputs: no unit is frozen, got " + std::to_string(frozen));
    std::vector<T> out;
    out.reserve(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) {
        auto hit = cache ? cache->get(ids[i]) : std::nullopt;
        if (hit && hit->level == frozen) {
            out.push_back(std::move(hit->value));
            ++count.cached;
            continue;
        }
        if (hit && hit->level < frozen) {
            out.push_back(run(i, std::optional<T>(std::move(hit->value)), hit->level, frozen));
            ++count.extended;
        } else {  // nothing cached, or cached deeper than asked (a caller going back: recompute)
            out.push_back(run(i, std::optional<T>(), 0, frozen));
            ++count.full;
        }
        if (cache && !(hit && hit->level >= frozen)) cache->put(ids[i], frozen, out.back());
    }
    return out;
}

} // namespace tpipe::elastic
