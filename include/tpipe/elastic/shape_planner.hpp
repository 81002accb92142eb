#pragma once
// The elastic driver's decisions for any freezable model: per interval, how many units freeze
// (the freeze policy), the pipeline that trains the rest (AutoPipe: cuts and depth), how many
// replicas the freed devices make (AutoDP) and each replica's units of one step: microbatches
// whose count the simulator picks, or, with token_slicing, the TeraPipe DP's rows x token
// slices for the new depth on the measured per-unit latencies (stage_token_latency). Every
// process of a job plans alike from the same unit times.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/autopipe.hpp"
#include "tpipe/elastic/driver_options.hpp"
#include "tpipe/elastic/fraction.hpp"
#include "tpipe/elastic/freeze.hpp"
#include "tpipe/elastic/replan.hpp"
#include "tpipe/elastic/stage_times.hpp"
#include "tpipe/elastic/stage_token_latency.hpp"
#include "tpipe/plan/slicing_dp.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe::elastic {

//! AutoPipe's pipeline latency from measured unit times: a stage's forward is its units' (frozen
//! units included unless their outputs come from the cache), its backward its active units'.
struct unit_latency {
    unit_seconds units;
    bool cached = true;
    tpipe::elastic::stage_times stage_times(std::span<const int> cuts, int frozen) const
    {
        tpipe::elastic::stage_times t;
        const bool fixed = !units.forward_fixed.empty();
        for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
            double f = 0, b = 0, ff = 0, bf = 0;
            for (int i = cuts[s]; i < cuts[s + 1]; ++i) {
                const auto k = static_cast<std::size_t>(i);
                if (i >= frozen) {
                    b += units.backward[k];
                    if (fixed) bf += units.backward_fixed[k];
                }
                if (i >= frozen || !cached) {
                    f += units.forward[k];
                    if (fixed) ff += units.forward_fixed[k];
                }
            }
            t.forward.push_back(f);
            t.backward.push_back(b);
            if (fixed) {
                t.forward_fixed.push_back(ff);
                t.backward_fixed.push_back(bf);
            }
        }
        return t;
    }
};

//! One interval's pipeline: what every replica runs.
struct interval_shape {
    int frozen = 0, stages = 1, replicas = 1;
    std::vector<int> unit_cuts;   //!< AutoPipe's, over every unit (frozen prefix in stage 0)
    std::vector<int> stage_cuts;  //!< what the replicas build (stage_request::cuts): from `frozen`
    tpipe::scheme units;          //!< one replica's units of one step
    double predicted_throughput = 0;  //!< samples per second over all replicas, simulated or planned

    replan_record record(int interval, bool cached) const
    {
        replan_record r;
        r.epoch = interval;
        r.frozen = frozen;
        r.stages = stages;
        r.replicas = replicas;
        r.microbatches = units.microbatches();
        r.cuts = unit_cuts;
        r.cached = cached && frozen > 0;
        r.predicted_throughput = predicted_throughput;
        if (units.max_slices() > 1)
            for (const auto& m : units.parts()) {
                replan_record::microbatch_slices x{m.row_end - m.row_begin, {}};
                for (std::size_t i = 1; i < m.cuts.size(); ++i) x.tokens.push_back(m.cuts[i] - m.cuts[i - 1]);
                r.slices.push_back(std::move(x));
            }
        return r;
    }
};

class shape_planner {
public:
    //! `costs`: the model's unit costs (AutoPipe partitions by them); `freezable`: how many leading
    //! units may freeze. The options' measured unit times price every candidate shape.
    shape_planner(std::vector<double> costs, int freezable, const driver_options& o)
        : o_(o), freezable_(freezable), units_(static_cast<int>(costs.size())), latency_{o.measured, o.autocache},
          autopipe_(std::move(costs), autopipe_options_of(o), latency_)
    {
        const auto n = static_cast<std::size_t>(units_);
        const std::string problem = unit_seconds_problem(o.measured, n);
        detail::require(problem.empty(), "elastic driver: " + problem);
        detail::require(freezable >= 0 && freezable < units_,
                        "elastic driver: the model says " + std::to_string(freezable) + " of its " + std::to_string(units_) +
                            " units may freeze; at least the last (the head) must stay active");
        detail::require(o.batch % o.devices == 0,
                        "elastic driver: the global batch (" + std::to_string(o.batch) + ") must be a multiple of the " +
                            std::to_string(o.devices) + " devices, so that any replica count shares it equally");
        if (o.slicing)
            detail::require(o.slicing->units.size() == n,
                            "elastic driver: token latencies for " + std::to_string(o.slicing->units.size()) +
                                " units; the model has " + std::to_string(n));
    }

    //! The frozen unit count of `interval` after `frozen` (the options' policy, checked).
    int next_frozen(int interval, int frozen) const
    {
        // Without AutoPipe the pipeline keeps its `devices` stages, each with an active unit.
        int cap = o_.max_frozen < 0 ? freezable_ : std::min(o_.max_frozen, freezable_);
        if (!o_.autopipe) cap = std::min(cap, units_ - o_.devices);
        const freeze_observation ob{interval, freezable_, frozen, std::max(cap, 0), {}};
        if (o_.freeze) {
            function_policy p{&o_.freeze};
            return tpipe::elastic::next_frozen(p, ob);
        }
        progressive_freeze p(fraction::nearest(o_.alpha));
        return tpipe::elastic::next_frozen(p, ob);
    }

    interval_shape initial() const { return complete(autopipe_.initial()); }
    //! The shape once `frozen` units are frozen, shrinking from `stages`.
    interval_shape replan(int frozen, int stages) const { return complete(autopipe_.replan(frozen, stages)); }
    const unit_seconds& measured() const { return latency_.units; }

    //! The shape a resumed run continues with, `frozen` units frozen after the saved `plan`: the
    //! saved plan itself when it freezes no more and fits this run (devices, batch, units), as the
    //! uninterrupted run kept it; otherwise a re-plan from the saved pipeline depth.
    interval_shape resume(const replan_record& plan, int frozen) const
    {
        if (frozen == plan.frozen)
            if (auto kept = restore(plan)) return *std::move(kept);
        if (frozen == 0) return initial();
        return replan(frozen, std::clamp(plan.stages, 1, o_.devices));
    }

    //! The shape `plan` recorded, if this run can hold it (none: it cannot).
    std::optional<interval_shape> restore(const replan_record& plan) const
    {
        const int K = plan.stages, D = plan.replicas;
        const auto& c = plan.cuts;
        if (K < 1 || D < 1 || K * D > o_.devices || o_.batch % D != 0 || plan.frozen < 0 || plan.frozen > freezable_ ||
            c.size() != static_cast<std::size_t>(K) + 1 || c.front() != 0 || c.back() != units_ ||
            (!o_.autopipe && K != o_.devices) || (!o_.autodp && D != 1) || (o_.slicing.has_value() != !plan.slices.empty()))
            return std::nullopt;
        for (std::size_t i = 1; i < c.size(); ++i)
            if (c[i] <= c[i - 1] || (i == 1 && c[i] <= plan.frozen)) return std::nullopt;
        interval_shape e;
        e.frozen = plan.frozen;
        e.stages = K;
        e.replicas = D;
        e.unit_cuts = c;
        e.stage_cuts = c;
        e.stage_cuts.front() = plan.frozen;
        const std::int64_t share = o_.batch / D;
        if (plan.slices.empty()) {
            if (plan.microbatches < 1 || plan.microbatches > share) return std::nullopt;
            e.units = microbatch_slicer{plan.microbatches}.scheme(batch_shape{share, o_.seq_len});
            // The shape's own pace, as complete() prices it (the record's figure is its interval's forecast).
            e.predicted_throughput = static_cast<double>(o_.batch) /
                                     simulate_iteration(latency_.stage_times(e.unit_cuts, e.frozen),
                                                        static_cast<double>(share), plan.microbatches);
            return e;
        }
        std::vector<scheme::microbatch> parts;
        std::int64_t row = 0;
        for (const auto& m : plan.slices) {
            scheme::microbatch mb{row, row + m.rows, {0}};
            for (auto t : m.tokens) mb.cuts.push_back(mb.cuts.back() + t);
            if (m.rows < 1 || mb.cuts.back() != o_.seq_len || mb.cuts.size() < 2) return std::nullopt;
            for (std::size_t i = 1; i < mb.cuts.size(); ++i)
                if (mb.cuts[i] <= mb.cuts[i - 1]) return std::nullopt;
            row += m.rows;
            parts.push_back(std::move(mb));
        }
        if (row != share) return std::nullopt;
        e.units = scheme(std::move(parts));
        e.predicted_throughput = static_cast<double>(o_.batch) / slices_plan(e).objective;  // the DP's figure, as complete()
        return e;
    }

private:
    struct function_policy {
        const std::function<int(int, int)>* f;
        int next_frozen(const freeze_observation& ob) const { return (*f)(ob.epoch, ob.frozen); }
    };

    static autopipe_options autopipe_options_of(const driver_options& o)
    {
        autopipe_options a;
        a.devices = o.devices;
        a.initial_stages = o.devices;
        a.min_stages = o.autopipe ? 1 : o.devices;  // without AutoPipe the pipeline keeps its length
        a.add_replicas = o.autodp;
        a.batch = o.batch;
        return a;
    }

    interval_shape complete(const pipeline_shape& s) const
    {
        interval_shape e;
        e.frozen = s.frozen;
        e.stages = s.stages;
        e.replicas = s.replicas;
        e.unit_cuts = s.layers.cuts;
        e.stage_cuts = s.layers.cuts;
        e.stage_cuts.front() = s.frozen;
        // The replica's share of the global batch (AutoPipe priced the whole batch on one pipeline).
        const int share = o_.batch / e.replicas;
        if (o_.slicing) {
            const auto plan = slices_plan(e);
            e.units = plan.scheme();
            e.predicted_throughput = static_cast<double>(o_.batch) / plan.objective;
        } else {
            const auto choice = choose_microbatches(latency_.stage_times(e.unit_cuts, e.frozen), share);
            e.units = microbatch_slicer{choice.microbatches}.scheme(batch_shape{share, o_.seq_len});
            e.predicted_throughput = static_cast<double>(o_.batch) / choice.iteration_seconds;
        }
        return e;
    }

    //! The TeraPipe DP's rows x token slices of one replica's share, for e's stages.
    slicing_plan slices_plan(const interval_shape& e) const
    {
        const stage_token_latency t(o_.slicing->units, e.stage_cuts);
        return plan_slices(t, slicing_problem{.stages = e.stages, .seq_len = o_.seq_len, .batch = o_.batch / e.replicas,
                                              .granularity = o_.slicing->granularity});
    }

    driver_options o_;
    int freezable_, units_;
    unit_latency latency_;
    autopipe<unit_latency> autopipe_;
};

} // namespace tpipe::elastic
