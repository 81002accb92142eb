#pragma once
// The elastic planner's inputs over MPI. Every process must plan alike: a plan decides which
// process sends to which, so two plans are a hang. Measured times differ between processes, so
// share_plan_inputs gives every process process 0's unit times and token-latency tables, and
// tpipe::mpi::elastic_driver refuses to start while the processes' plan_inputs_digest differ.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/plan/table_latency.hpp"
#include "tpipe/state/checksum.hpp"

namespace tpipe::mpi {

namespace detail {
inline task<void> broadcast_bytes(communicator& c, std::span<std::byte> b) { co_await c.broadcast(b, 0); }
} // namespace detail

//! Process 0's o.measured (forward and backward seconds of `units` units, and the optional fixed
//! microbatch, update and reduce seconds) and o.slicing (per-unit token latency tables,
//! granularity) on every process of `c`. Other processes may come with
//! them empty (only process 0 need measure). Collective.
inline void share_plan_inputs(communicator& c, elastic::driver_options& o, std::size_t units)
{
    std::vector<double> flat;  // forward, backward, then 0 or 1 + granularity + per unit: count, (b, s, c, t)...
    if (c.rank() == 0) {
        if (o.measured.forward.size() != units || o.measured.backward.size() != units)
            throw invalid_argument("tpipe::mpi::share_plan_inputs: process 0 measured " +
                                   std::to_string(o.measured.forward.size()) + " forward and " +
                                   std::to_string(o.measured.backward.size()) + " backward unit times for " +
                                   std::to_string(units) + " units; measure every unit on process 0");
        flat = o.measured.forward;
        flat.insert(flat.end(), o.measured.backward.begin(), o.measured.backward.end());
        for (const auto& [name, v] : elastic::optional_times(o.measured)) {  // each as its size, then its values
            flat.push_back(static_cast<double>(v->size()));
            flat.insert(flat.end(), v->begin(), v->end());
        }
        flat.push_back(o.slicing ? 1 : 0);
        if (o.slicing) {
            if (o.slicing->units.size() != units)
                throw invalid_argument("tpipe::mpi::share_plan_inputs: process 0 has token latency tables for " +
                                       std::to_string(o.slicing->units.size()) + " units, not " + std::to_string(units));
            flat.push_back(static_cast<double>(o.slicing->granularity));
            for (const auto& t : o.slicing->units) {
                flat.push_back(static_cast<double>(t.samples().size()));
                for (const auto& p : t.samples())
                    flat.insert(flat.end(), {static_cast<double>(p.b), static_cast<double>(p.s), static_cast<double>(p.c), p.seconds});
            }
        }
    }
    std::int64_t n = static_cast<std::int64_t>(flat.size());
    sync_wait(detail::broadcast_bytes(c, std::as_writable_bytes(std::span<std::int64_t>(&n, 1))));
    flat.resize(static_cast<std::size_t>(n));
    sync_wait(detail::broadcast_bytes(c, std::as_writable_bytes(std::span<double>(flat))));
    const auto at = [&](std::size_t i) { return static_cast<std::int64_t>(flat[i]); };
    o.measured.forward.assign(flat.begin(), flat.begin() + static_cast<std::ptrdiff_t>(units));
    o.measured.backward.assign(flat.begin() + static_cast<std::ptrdiff_t>(units),
                               flat.begin() + static_cast<std::ptrdiff_t>(2 * units));
    std::size_t i = 2 * units;
    for (const auto& [name, v] : elastic::optional_times(o.measured)) {
        const auto size = static_cast<std::size_t>(at(i++));
        v->assign(flat.begin() + static_cast<std::ptrdiff_t>(i), flat.begin() + static_cast<std::ptrdiff_t>(i + size));
        i += size;
    }
    if (flat[i++] == 0) {
        o.slicing.reset();
        return;
    }
    elastic::token_slicing s;  // integers travel as doubles: exact below 2^53
    s.granularity = at(i++);
    for (std::size_t u = 0; u < units; ++u) {
        std::vector<latency_sample> samples(static_cast<std::size_t>(at(i++)));
        for (auto& p : samples) {
            p = {.b = at(i), .s = at(i + 1), .c = at(i + 2), .seconds = flat[i + 3]};
            i += 4;
        }
        s.units.emplace_back(std::move(samples));
    }
    o.slicing = std::move(s);
}

//! What the elastic planner plans from, as one number: the unit costs and freezable count, the
//! options that shape plans, the measured times and the token latency tables.
inline std::uint64_t plan_inputs_digest(const std::vector<double>& unit_costs, int freezable,
                                        const elastic::driver_options& o)
{
    state::checksum sum(state::checksum_kind::fnv1a64);
    auto add = [&](const auto& v) { sum.update(std::as_bytes(std::span(&v, 1))); };
    auto add_all = [&](const std::vector<double>& v) { sum.update(std::as_bytes(std::span(v))); add(v.size()); };
    add_all(unit_costs);
    add(freezable);
    for (auto v : {std::int64_t{o.devices}, std::int64_t{o.batch}, o.seq_len, o.steps, o.freeze_every,
                   std::int64_t{o.max_frozen}, std::int64_t{o.autopipe}, std::int64_t{o.autodp}})
        add(v);
    add(o.alpha);
    add_all(o.measured.forward);
    add_all(o.measured.backward);
    add_all(o.measured.forward_fixed);  // a microbatch's fixed cost shapes the plans too
    add_all(o.measured.backward_fixed);
    add(o.slicing.has_value());
    if (o.slicing) {
        add(o.slicing->granularity);
        for (const auto& t : o.slicing->units)
            for (const auto& p : t.samples()) add(p);
    }
    return sum.value();
}

} // namespace tpipe::mpi
