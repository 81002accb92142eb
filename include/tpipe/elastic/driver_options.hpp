#pragma once
// What the elastic driver is told (driver_options) and what it reports per interval
// (interval_report) and per run (run_report). Shared by the thread driver
// (tpipe/elastic/thread_driver.hpp) and process backends built on tpipe/elastic/driver_loop.hpp.
//
// Semantics (the paper leaves them open or does otherwise):
// - The global batch is fixed: each step trains `batch` samples whatever the replica count, each
//   of D replicas its batch / D share (epoch_sampler). The paper keeps the per-pipeline batch
//   and so grows the global batch with D, which changes the optimisation.
// - Re-plans happen at interval boundaries (every `freeze_every` steps, default one epoch).
#include <array>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/elastic/cache.hpp"
#include "tpipe/elastic/frozen_outputs.hpp"
#include "tpipe/elastic/replan.hpp"
#include "tpipe/plan/table_latency.hpp"
#include "tpipe/slice/scheme.hpp"

namespace tpipe::elastic {

//! Seconds per sample of each pipelined unit's forward and backward (the planner's costs), and
//! the fixed seconds each forward (backward) compute of a microbatch pays whatever its rows
//! (empty: none), so that a microbatch of r rows costs fixed + r * per sample: a framework's
//! per-operator cost, which a one-row microbatch pays in full and a whole batch spreads. And, for
//! the interval forecast only (empty: not measured, priced 0; plans do not depend on them),
//! seconds of one optimizer step over each unit's parameters, and of one all-reduce of each unit's
//! gradients between two replicas (a ring moves 2(r - 1)/r of the bytes per member for r
//! replicas, 1 of them at r = 2).
struct unit_seconds {
    std::vector<double> forward, backward;
    std::vector<double> update{};
    std::vector<double> reduce{};
    std::vector<double> forward_fixed{}, backward_fixed{};
};

//! The unit times a model may leave unmeasured (empty), each with the name files and checkpoints
//! give it, in the order processes send them: what sharing (tpipe::mpi::share_plan_inputs),
//! plan inputs files and checkpoints carry besides forward and backward.
template <class U>
    requires std::same_as<std::remove_const_t<U>, unit_seconds>
auto optional_times(U& u)
{
    using times = std::conditional_t<std::is_const_v<U>, const std::vector<double>*, std::vector<double>*>;
    return std::array<std::pair<const char*, times>, 4>{
        {{"update", &u.update}, {"reduce", &u.reduce}, {"forward_fixed", &u.forward_fixed}, {"backward_fixed", &u.backward_fixed}}};
}

//! Why `u` cannot price a model of `units` units, or "" if it can: every unit's forward and
//! backward time measured (positive, or 0 where its fixed microbatch time is positive: all of it
//! per microbatch), and each optional time given for none or every unit, the fixed ones finite
//! and >= 0 (and both or neither). The elastic driver refuses such times, and so does a
//! checkpoint or plan inputs file that holds them.
inline std::string unit_seconds_problem(const unit_seconds& u, std::size_t units)
{
    const auto count = [](std::size_t n) { return std::to_string(n); };
    if (u.forward.size() != units || u.backward.size() != units)
        return "measured unit times for " + count(u.forward.size()) + " forward and " + count(u.backward.size()) +
               " backward units; the model has " + count(units) + " (measure every unit before planning)";
    if (u.forward_fixed.empty() != u.backward_fixed.empty())
        return "fixed microbatch times for " + count(u.forward_fixed.size()) + " forward and " + count(u.backward_fixed.size()) +
               " backward units; give none, or " + count(units) + " of each (one per unit)";
    for (const auto& [name, times] : optional_times(u))
        if (!times->empty() && times->size() != units)
            return std::string(name) + " times for " + count(times->size()) + " units; give none, or " + count(units) +
                   " (one per unit)";
    for (const auto* fixed : {&u.forward_fixed, &u.backward_fixed})
        for (double s : *fixed)
            if (!(s >= 0 && std::isfinite(s)))
                return "a fixed microbatch time is " + std::to_string(s) + " s; each must be a finite number of seconds >= 0";
    for (const bool fwd : {true, false})
        for (std::size_t i = 0; i < units; ++i) {
            const double t = (fwd ? u.forward : u.backward)[i];
            const std::vector<double>& fixed = fwd ? u.forward_fixed : u.backward_fixed;
            const bool paid = t > 0 || (t == 0 && !fixed.empty() && fixed[i] > 0);
            if (!paid || !std::isfinite(t))
                return "measured unit time " + std::string(fwd ? "forward[" : "backward[") + count(i) + "] is " + std::to_string(t) +
                       " s; every unit's time must be a positive number of seconds (or 0 where its fixed microbatch time is "
                       "positive)";
        }
    return {};
}

//! TeraPipe inside the elastic pipeline: at every re-plan the slicing DP cuts the replica's
//! share of the batch into rows x token slices for the new pipeline's depth, on the latency of
//! its slowest stage composed from the measured per-unit latencies below.
struct token_slicing {
    std::vector<table_latency> units;  //!< per pipelined unit: forward + backward of b rows, s tokens, c context
    std::int64_t granularity = 1;      //!< token cuts are multiples of it
};

struct driver_options {
    int devices = 2;               //!< N: the starting pipeline's length, and the devices replicas may use
    int batch = 8;                 //!< global batch: samples per step over every replica
    std::int64_t seq_len = 1;      //!< tokens per sample
    std::int64_t steps = 0;        //!< steps to train
    std::int64_t freeze_every = 0; //!< steps per freeze interval (0: one epoch)
    double alpha = 1.0 / 3;        //!< freeze degree of the progressive policy
    int max_frozen = -1;           //!< most units that may freeze (-1: every freezable unit)
    bool autopipe = true;          //!< shorten the pipeline as units freeze
    bool autodp = true;            //!< freed devices become replicas
    bool autocache = true;         //!< cache the frozen prefix's outputs
    std::size_t cache_bytes = std::size_t{256} << 20;  //!< AutoCache's host budget (beyond it: disk)
    int threads = 0;               //!< compute threads in all (0: hardware threads)
    std::uint64_t seed = 1;        //!< sample order (models may use it for their weights too)
    unit_seconds measured{};       //!< the planner's unit times (the driver refuses to plan without them)
    std::optional<token_slicing> slicing{};  //!< TeraPipe slices (none: microbatches of whole sequences)
    //! A step that makes no progress for this long fails (run_options::watchdog of every
    //! pipeline; under MPI also the bound of every collective, tpipe::mpi::communicator::
    //! set_watchdog, so that a stopped process is named and the job ends). 0: no watchdog.
    std::chrono::milliseconds watchdog{std::chrono::seconds(60)};
    //! Tests: the frozen unit count of interval i given the previous one (replaces the policy).
    std::function<int(int interval, int frozen)> freeze{};
    //! Asked before every step with the number of steps done; true ends the run at that step
    //! boundary (run_report::stopped_after), e.g. on SIGTERM. Processes of one run must answer
    //! alike: agree first (an all-reduce of their answers).
    std::function<bool(std::int64_t steps_done)> stop{};
    //! Called after every step (its optimizer step done) with the steps done and the plan the
    //! step ran under: where a trainer saves a checkpoint (the plan is the checkpoint's elastic
    //! state, resume_point below).
    std::function<void(std::int64_t steps_done, const replan_record& plan)> after_step{};
};

//! Where a resumed run continues: `steps_done` steps trained, the last of them under `plan` (a
//! checkpoint's elastic state). The model must hold that step's state, with plan.frozen units
//! frozen, before the run starts. The run continues under the saved plan (shape_planner::restore)
//! as long as the uninterrupted run would have kept it, so that it trains the same bits; a plan
//! this run cannot hold (fewer devices) is re-planned from its frozen count. The frozen prefix's
//! outputs are computed again (AutoCache starts empty): the same bits, more work.
struct resume_point {
    std::int64_t steps_done = 0;
    replan_record plan;
};

//! Percentiles of an interval's step times, in seconds.
struct step_spread {
    double p10 = 0, p90 = 0;
};

//! One interval: its plan and what it measured.
struct interval_report {
    replan_record plan;            //!< epoch = interval index; measured_throughput in samples/s
    std::int64_t first_step = 0, steps = 0;
    std::vector<int> stage_cuts;   //!< what the replicas built (stage_request::cuts)
    tpipe::scheme units;           //!< each replica's units of one step
    double seconds = 0;            //!< training time of the interval's steps
    double predicted_seconds = 0;  //!< forecast: steps x the shape's step, its frozen-prefix work, optimizer steps
    step_spread spread{};          //!< how the measured steps spread
    double replan_seconds = 0;     //!< re-forming replicas, communicators and pipelines before it
    double mean_loss = 0;
    cache_stats cache{};
    std::int64_t rows_computed = 0, rows_extended = 0, rows_cached = 0;  //!< frozen-prefix rows by source
    frozen_counters predicted_rows{};  //!< what the forecast expected of them (equal unless the run stopped early)
};

struct run_report {
    std::vector<interval_report> intervals;
    bool replicas_identical = true;    //!< after every interval, every replica held replica 0's trainable state
    bool replans_kept_weights = true;  //!< every re-plan handed replica 0's trainable state over bitwise
    double seconds = 0;                //!< training, re-plans included
    std::int64_t stopped_after = -1;   //!< steps done when driver_options::stop ended the run (-1: it ran to the end)
};

//! The schedule the driver runs a scheme with: 1F1B over microbatches, TeraPipe's 1F1B over
//! token slices (which keeps every microbatch's slices in causal order).
inline const char* schedule_for(const tpipe::scheme& units)
{
    return units.max_slices() > 1 ? "terapipe-1f1b" : "1f1b";
}

} // namespace tpipe::elastic
