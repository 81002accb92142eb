// tpipe-plan slice: the exact TeraPipe slicing for a latency model, with the uniform and
// microbatch-only alternatives priced by the same objective. With one latency model per stage
// (--model repeated K times) it plans with the slowest stage's model (plan/stage_latencies.hpp)
// and prints the plan's GPipe makespan simulated with each stage priced by its own model.
#include <cmath>
#include <filesystem>
#include <limits>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "command.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/plan/baselines.hpp"
#include "tpipe/plan/latency_costs.hpp"
#include "tpipe/plan/latency_json.hpp"
#include "tpipe/plan/memory_fit.hpp"
#include "tpipe/plan/memory_model.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/schedule_choice.hpp"
#include "tpipe/plan/slicing_dp.hpp"
#include "tpipe/plan/stage_latencies.hpp"

namespace {

constexpr const char* usage = R"(usage: tpipe-plan slice [--model FILE.json|PRESET | --model STAGE0.json ... --model STAGE{K-1}.json]
                        --stages K --seq-len L [--batch B]
                        [--granularity G] [--shared-cut | --per-microbatch]
                        [--max-microbatch R] [--device NAME] [--link NAME] [--tensor-parallel N]
                        [--form calibrated|roofline] [--max-partitions N]
                        [--memory-per-device BYTES] [--schedule NAME [--candidates N] [--within F]]
                        [--json]

Chooses token slices (and microbatch sizes) minimising one iteration's pipeline time
  T = sum_u t_u + (K-1) * max_u t_u
exactly, for a K-stage pipeline over sequences of L tokens and a batch of B rows.

  --model            a latency model file ({"kind": "polynomial" | "table" | "analytic", ...})
                     or a built-in transformer: gpt3-1b, gpt3-13b, gpt3-44b, gpt3-175b
                     (analytic model of ceil(layers/K) layers per stage). Default: gpt3-175b.
                     Given K times (files only), stage k's model is the k-th: the DP plans with
                     the slowest stage's time max_k t_k (its objective T is then an upper bound on
                     the makespan) and the plan's GPipe makespan with each stage priced by its own
                     model is simulated and printed ("simulated"). Once or K times, no other count.
  --device           device of a built-in model: v100 (default), a100, h100, h200
  --link             link between stages of a built-in model: eth-25g, ib-hdr, ib-ndr
                     (default: the device's usual link: v100 eth-25g, a100 ib-hdr, else ib-ndr)
  --tensor-parallel  tensor-parallel degree of a built-in model (default 1)
  --form             analytic form of a built-in model: calibrated (default; wave
                     quantisation, gradient accumulation, host floor, effective link rate) or
                     roofline (the earlier model)
  --stages K         pipeline stages (>= 1)
  --seq-len L        tokens per sequence
  --batch B          rows per pipeline iteration (default 1)
  --granularity G    slice lengths are multiples of G tokens; G must divide L (default 1)
  --shared-cut       one token cut for every microbatch (default; what a grid runtime runs)
  --per-microbatch   an independent token cut per microbatch
  --max-microbatch R at most R rows per microbatch (default: the whole batch), e.g. the
                     largest b a profiled table covers
  --max-partitions N shared cut: search every partition of B into microbatch sizes while
                     there are at most N (default 2000, i.e. B <= 25); beyond, search only
                     balanced partitions (m microbatches of floor/ceil B/m rows, every m),
                     print "exact: no" and, for B <= 256, a certified lower bound
  --memory-per-device BYTES
                     memory of one device, e.g. 16GiB, 14GB, 80e9 (analytic models: the stage's
                     weights, gradients, fp32 master and Adam state, 16 B per parameter, plus its
                     activations and K/V, docs/planner.md "Memory"). Plans that do not fit are
                     refused: the best fitting shared cut of the DP's microbatches is taken; if
                     none fits, activation recomputation (each unit keeps only its stage input) is
                     tried and, when a plan then fits, used and printed; else an error names the
                     least need
  --schedule NAME    choose among the near-optimal plans by the simulated makespan of this
                     schedule (one stage per rank: terapipe-1f1b, terapipe-gpipe, gpipe, 1f1b,
                     zb-h1), with the analytic model's link as a resource of its own (sends do
                     not block); prints the DP objective and the simulated makespan of the DP's
                     plan and of the chosen one. Shared cut only
  --candidates N     with --schedule: at most N near-optimal cuts besides the DP's (default 64)
  --within F         with --schedule: every cut within F of the DP objective (default 0.05),
                     up to --candidates; "complete: yes" when the set holds all of them
  --json             one JSON object: slices, microbatches, objective, t_max, solve_seconds,
                     uniform_objective, microbatch_only_objective, speedup_over_microbatch_only,
                     for an analytic model "model": every parameter it used, and "memory";
                     with --schedule, "schedule": the DP's plan and the chosen one, simulated;
                     with one model per stage, "stage_models": the files, the schedule simulated,
                     its makespan and each stage's busy seconds

An analytic model prints the device, the link and every parameter it uses, derived ones
included.
)";

std::string list(const std::vector<std::int64_t>& v)
{
    std::ostringstream os;
    for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << v[i];
    return os.str();
}

//! A run-length summary such as "160 x 9, 152 x 4" for long slice lists.
std::string runs(const std::vector<std::int64_t>& v)
{
    std::ostringstream os;
    for (std::size_t i = 0; i < v.size();) {
        std::size_t j = i;
        while (j < v.size() && v[j] == v[i]) ++j;
        os << (i ? ", " : "") << v[i];
        if (j - i > 1) os << " x " << j - i;
        i = j;
    }
    return os.str();
}

//! "1.23 GiB (1.32e+09 B)".
std::string bytes(double b)
{
    std::ostringstream os;
    os << std::fixed << std::setprecision(2) << b / (1024.0 * 1024 * 1024) << " GiB (" << std::defaultfloat
       << std::setprecision(4) << b << " B)";
    return os.str();
}

bool is_model_preset(const std::string& name)
{
    for (const auto& m : tpipe::presets::models)
        if (m.name == name) return true;
    return false;
}

int run_slice(tpipe::flag_reader& a)
{
    if (a.flag("--help") || a.flag("-h")) {
        std::cout << usage;
        return 0;
    }
    const std::vector<std::string> model_args = a.values("--model");
    const auto device_arg = a.value("--device");
    const auto tp_arg = a.value("--tensor-parallel");
    const auto link_arg = a.value("--link");
    const auto form_arg = a.value("--form");
    tpipe::slicing_problem problem;
    problem.stages = a.required_number<int>("--stages", 1, std::numeric_limits<int>::max());
    problem.seq_len = a.required_number<std::int64_t>("--seq-len", 1, std::numeric_limits<std::int64_t>::max());
    problem.batch = a.number<std::int64_t>("--batch", 1, 1, std::numeric_limits<std::int64_t>::max());
    problem.granularity = a.number<std::int64_t>("--granularity", 1, 1, std::numeric_limits<std::int64_t>::max());
    problem.max_microbatch = a.number<std::int64_t>("--max-microbatch", 0, 1, std::numeric_limits<std::int64_t>::max());
    problem.max_partitions = a.number<std::size_t>("--max-partitions", problem.max_partitions, 1, 1'000'000);
    const bool shared = a.flag("--shared-cut"), per = a.flag("--per-microbatch");
    const bool as_json = a.flag("--json");
    const auto budget_arg = a.value("--memory-per-device");
    const auto schedule_arg = a.value("--schedule");
    tpipe::ranking_options ranking;
    const auto candidates_arg = a.value("--candidates"), within_arg = a.value("--within");
    a.finish();
    if ((candidates_arg || within_arg) && !schedule_arg)
        throw tpipe::invalid_argument("--candidates and --within choose the plans --schedule simulates; give --schedule");
    if (candidates_arg) ranking.max_plans = tpipe::flag_reader::parse<std::size_t>("--candidates", *candidates_arg);
    if (within_arg) ranking.within = tpipe::flag_reader::parse<double>("--within", *within_arg);
    if (ranking.max_plans < 1 || !(ranking.within >= 0))
        throw tpipe::invalid_argument("--candidates must be >= 1 and --within >= 0");
    const bool has_budget = budget_arg.has_value();
    const double budget = has_budget ? tpipe::parse_bytes(*budget_arg) : std::numeric_limits<double>::infinity();
    const std::optional<std::string> schedule =
        schedule_arg ? std::optional<std::string>(tpipe::canonical_schedule_name(*schedule_arg)) : std::nullopt;
    if (schedule && per)
        throw tpipe::invalid_argument("--schedule chooses among shared cuts; drop --per-microbatch");
    if (shared && per) throw tpipe::invalid_argument("choose one of --shared-cut and --per-microbatch, not both");
    problem.mode = per ? tpipe::cut_mode::per_microbatch : tpipe::cut_mode::shared;

    const std::string model_arg = model_args.empty() ? std::string("gpt3-175b") : model_args.front();
    // One model per stage: every file loaded, planned as the slowest stage.
    std::optional<tpipe::slowest_stage_latency<tpipe::any_latency>> stage_models;
    if (model_args.size() > 1) {
        if (model_args.size() != static_cast<std::size_t>(problem.stages))
            throw tpipe::invalid_argument("--model is given " + std::to_string(model_args.size()) +
                                          " times with --stages " + std::to_string(problem.stages) +
                                          "; give it once (one model for every stage) or " +
                                          std::to_string(problem.stages) + " times (one model per stage)");
        if (device_arg || tp_arg || link_arg || form_arg)
            throw tpipe::invalid_argument("--device, --link, --tensor-parallel and --form apply to a built-in model; "
                                          "with one model per stage put them in each stage's model file");
        if (has_budget)
            throw tpipe::invalid_argument("--memory-per-device needs one transformer's shape; it does not apply with "
                                          "one model per stage");
        std::vector<tpipe::any_latency> loaded;
        for (std::size_t k = 0; k < model_args.size(); ++k) {
            const auto& file = model_args[k];
            if (is_model_preset(file))
                throw tpipe::invalid_argument("--model " + file + " (stage " + std::to_string(k) +
                                              ") is a built-in model, which plans a whole pipeline of identical "
                                              "stages; with one model per stage give a latency model file for each");
            if (!std::filesystem::exists(file))
                throw tpipe::invalid_argument("--model \"" + file + "\" (stage " + std::to_string(k) +
                                              ") is not a file");
            loaded.push_back(tpipe::load_latency(file, tpipe::latency_context{problem.stages}));
        }
        stage_models.emplace(std::move(loaded));
    }

    tpipe::any_latency model;
    std::string model_text;
    std::optional<tpipe::analytic_latency> analytic;
    if (stage_models) {
        model = *stage_models;
        model_text = std::to_string(stage_models->stages()) + " stage models, planned as the slowest stage (max_k t_k):";
        for (const auto& f : model_args) model_text += " " + f;
    } else if (is_model_preset(model_arg)) {
        const auto& shape = tpipe::presets::model(model_arg);
        const auto& dev = tpipe::presets::device(device_arg.value_or("v100"));
        const auto& lnk = link_arg ? tpipe::presets::link(*link_arg) : tpipe::presets::default_link(dev);
        tpipe::analytic_latency::options opt;
        if (tp_arg) opt.tensor_parallel = tpipe::flag_reader::parse<int>("--tensor-parallel", *tp_arg, 1, 1 << 16);
        if (form_arg) opt.form = tpipe::analytic_form_of(*form_arg);
        analytic = tpipe::presets::analytic(shape, problem.stages, dev, lnk, opt);
        model_text = std::string(shape.name) + " (built-in ";
    } else {
        if (device_arg || tp_arg || link_arg || form_arg)
            throw tpipe::invalid_argument("--device, --link, --tensor-parallel and --form apply to a built-in model "
                                          "(gpt3-1b, gpt3-13b, gpt3-44b, gpt3-175b); put them in the model file instead");
        if (!std::filesystem::exists(model_arg))
            throw tpipe::invalid_argument("--model \"" + model_arg +
                                          "\" is neither a file nor a built-in model (gpt3-1b, gpt3-13b, gpt3-44b, "
                                          "gpt3-175b)");
        model = tpipe::load_latency(model_arg, tpipe::latency_context{problem.stages});
        if (const auto* a = model.get<tpipe::analytic_latency>()) analytic = *a;
        model_text = model_arg + (analytic ? " (" : "");
    }
    if (analytic) {
        model = *analytic;
        model_text += "analytic, " + std::string(tpipe::to_string(analytic->settings().form)) + " form, device " +
                      std::string(analytic->device().name) + ", link " + std::string(analytic->link().name) + ")";
    }

    std::optional<tpipe::memory_model> memory;
    if (analytic) memory.emplace(*analytic, problem.seq_len);
    if (has_budget && !memory)
        throw tpipe::invalid_argument("--memory-per-device needs a transformer's shape: a built-in model or an analytic "
                                      "model file");

    const auto dp_plan = tpipe::plan_slices(model, problem);
    auto plan = dp_plan;
    auto all_alive = [&](const tpipe::slicing_plan& q) {
        return memory->static_bytes() + memory->all_alive_bytes(q.scheme());
    };
    // With a budget, the objective's own schedule (every unit alive on the first stage) must fit.
    bool memory_fallback = false; // the fitting plan is the best fitting uniform cut, not certified
    bool recompute = false;  // chosen because no plan fits without it
    if (has_budget && !schedule) {
        auto fit = tpipe::fit_in_memory(model, problem, dp_plan, *memory, budget);
        if (!fit.fits) {
            auto o = memory->options();
            o.recompute = true;
            const tpipe::memory_model with(*analytic, problem.seq_len, o);
            auto again = tpipe::fit_in_memory(model, problem, dp_plan, with, budget);
            if (again.fits) {
                memory.emplace(with);
                fit = std::move(again);
                recompute = true;
            }
        }
        const std::string least = bytes(fit.least_bytes) + " (" + bytes(memory->static_bytes()) +
                                  " static, microbatches of 1 row, slices of " + std::to_string(problem.granularity) +
                                  " tokens)";
        if (!fit.fits && fit.least_bytes > budget)
            throw tpipe::invalid_argument("no plan fits in " + bytes(budget) + " per device: the least any plan needs is " +
                                          least + "; give more memory, more stages or more tensor parallelism");
        if (!fit.fits && per)
            throw tpipe::invalid_argument("the optimal per-microbatch plan needs " + bytes(fit.bytes) +
                                          " per device, more than --memory-per-device; use --shared-cut to search "
                                          "the plans that fit");
        if (!fit.fits)
            throw tpipe::invalid_argument("no plan of the DP's microbatches [" + list(plan.microbatches) +
                                          "] found that fits in " + bytes(budget) + " per device after " +
                                          std::to_string(fit.nodes) + " partial cuts; the least any plan needs is " +
                                          least + "; try --max-microbatch 1 or more memory");
        plan = fit.plan;
        memory_fallback = !fit.certified;
    }
    std::optional<tpipe::schedule_choice> choice;
    if (schedule) {
        const tpipe::memory_model* mem = memory ? &*memory : nullptr;
        if (stage_models)
            choice = tpipe::choose_by_schedule(model, problem, plan, *schedule,
                                               tpipe::stage_latency_costs(*stage_models), ranking, mem, budget);
        else if (analytic)
            choice = tpipe::choose_by_schedule(model, problem, plan, *schedule, tpipe::link_priced_costs(*analytic),
                                               ranking, mem, budget);
        else
            choice = tpipe::choose_by_schedule(model, problem, plan, *schedule, tpipe::latency_costs(model), ranking,
                                               mem, budget);
    }
    // One model per stage: the plan's GPipe makespan with each stage priced by its own model (a
    // third of t forward, the rest backward, transfers inside t), which the DP's T bounds above.
    std::optional<tpipe::simulation> per_stage;
    if (stage_models)
        per_stage = tpipe::simulate_plan("gpipe", plan, tpipe::stage_latency_costs(*stage_models));
    const auto uniform = tpipe::best_uniform(model, problem, plan.microbatches);
    const auto gpipe = tpipe::best_microbatch_only(model, problem);
    // A plan of no time compares with nothing (0/0 would print nan): a model that predicts 0 s
    // for every slice is refused.
    if (!(plan.objective > 0) || !(uniform.objective > 0) || !std::isfinite(gpipe.objective))
        throw tpipe::invalid_argument("the latency model predicts " + std::to_string(plan.objective) +
                                      " s for the whole plan (every slice costs nothing, or its terms cancel): no cut "
                                      "is better than another; give a model whose slices take time");
    const double speedup = gpipe.objective / plan.objective;

    if (as_json) {
        tpipe::json::array slices;
        auto lengths = [](const std::vector<std::int64_t>& v) {
            tpipe::json::array out;
            for (auto l : v) out.emplace_back(l);
            return out;
        };
        if (problem.mode == tpipe::cut_mode::shared) {
            slices = lengths(plan.slices.front());
        } else {
            for (const auto& s : plan.slices) slices.emplace_back(lengths(s));
        }
        tpipe::json::object out{{"slices", std::move(slices)},
                                {"microbatches", lengths(plan.microbatches)},
                                {"objective", plan.objective},
                                {"t_max", plan.t_max},
                                {"solve_seconds", plan.stats.solve_seconds},
                                {"uniform_objective", uniform.objective},
                                {"microbatch_only_objective", gpipe.objective},
                                {"speedup_over_microbatch_only", speedup},
                                {"exact", plan.stats.exact},
                                {"lower_bound", plan.stats.lower_bound}};
        if (analytic) out["model"] = tpipe::to_json(*analytic);
        if (per_stage) {
            tpipe::json::array files, busy;
            for (const auto& f : model_args) files.emplace_back(f);
            for (double b : per_stage->busy) busy.emplace_back(b);
            out["stage_models"] = tpipe::json::object{{"files", std::move(files)},
                                                      {"schedule", "gpipe"},
                                                      {"simulated_makespan", per_stage->makespan},
                                                      {"stage_busy_seconds", std::move(busy)}};
        }
        if (memory)
            out["memory"] = tpipe::json::object{{"static_bytes", memory->static_bytes()},
                                                {"parameters", memory->parameters()},
                                                {"bytes_per_parameter", memory->options().bytes_per_parameter()},
                                                {"all_alive_activation_bytes", memory->all_alive_bytes(plan.scheme())},
                                                {"peak_bytes", all_alive(plan)},
                                                {"recompute", memory->options().recompute},
                                                {"budget_bytes", has_budget ? tpipe::json::value(budget) : nullptr}};
        if (choice) {
            auto candidate = [&](const tpipe::scheduled_plan& c) {
                tpipe::json::array act;
                for (double b : c.activation_bytes) act.emplace_back(b);
                return tpipe::json::object{{"slices", lengths(c.plan.slices.front())},
                                           {"microbatches", lengths(c.plan.microbatches)},
                                           {"objective", c.plan.objective},
                                           {"simulated_makespan", c.makespan},
                                           {"activation_bytes_per_rank", std::move(act)},
                                           {"peak_bytes", c.peak_bytes}};
            };
            out["schedule"] = tpipe::json::object{{"name", *schedule},
                                                  {"candidates", static_cast<double>(choice->candidates.size())},
                                                  {"complete", choice->ranking.complete},
                                                  {"within", ranking.within},
                                                  {"dp_plan", candidate(choice->candidates.front())},
                                                  {"chosen", candidate(choice->candidates[choice->chosen])}};
        }
        std::cout << tpipe::json::dump(out) << "\n";
        return 0;
    }
    std::cout << std::setprecision(6);
    std::cout << "model             " << model_text << "\n";
    if (analytic)
        for (const auto& p : analytic->parameters())
            std::cout << "  " << std::setw(28) << std::left << p.name << std::right << " " << p.value
                      << (p.unit.empty() ? "" : " ") << p.unit << "\n";
    std::cout << "problem           K=" << problem.stages << " stages, L=" << problem.seq_len << " tokens, B="
              << problem.batch << " rows, G=" << problem.granularity << ", "
              << (problem.mode == tpipe::cut_mode::shared ? "shared cut" : "per-microbatch cuts") << "\n";
    std::cout << "microbatches      " << plan.microbatches.size() << " of rows [" << list(plan.microbatches) << "]\n";
    if (problem.mode == tpipe::cut_mode::shared) {
        std::cout << "slices            " << plan.slices.front().size() << " (tokens, first token first): "
                  << list(plan.slices.front()) << "\n";
        std::cout << "                  = " << runs(plan.slices.front()) << "\n";
    } else {
        for (std::size_t m = 0; m < plan.slices.size(); ++m)
            std::cout << "slices of mb " << std::setw(4) << std::left << m << " " << plan.slices[m].size() << ": "
                      << list(plan.slices[m]) << "\n";
    }
    std::cout << "units             " << plan.units() << "\n";
    std::cout << "objective         " << plan.objective << " s  (sum " << plan.sum << " s + " << problem.stages - 1
              << " x t_max)\n";
    std::cout << "t_max             " << plan.t_max << " s\n";
    if (per_stage) {
        std::cout << "simulated         " << per_stage->makespan << " s  (GPipe, each stage priced by its own model; "
                  << std::fixed << std::setprecision(2) << std::showpos
                  << 100 * (per_stage->makespan / plan.objective - 1) << std::noshowpos << std::defaultfloat
                  << std::setprecision(6) << " % from the objective, which bounds it above)\n";
        std::cout << "stage busy        ";
        for (std::size_t k = 0; k < per_stage->busy.size(); ++k)
            std::cout << (k ? ", " : "") << per_stage->busy[k] << " s";
        std::cout << "  (stage 0 first)\n";
    }
    std::cout << "uniform slicing   " << uniform.objective << " s  (best uniform: " << uniform.slices.front().size()
              << " slices, same microbatches)\n";
    std::cout << "microbatch-only   " << gpipe.objective << " s  (" << gpipe.microbatches.size()
              << " microbatches of rows [" << list(gpipe.microbatches) << "], no token slicing)\n";
    std::cout << "speedup           " << std::fixed << std::setprecision(3) << speedup << "x over microbatch-only, "
              << uniform.objective / plan.objective << "x over uniform\n";
    if (plan.stats.exact) {
        std::cout << "exact             yes\n";
    } else if (memory_fallback) {
        std::cout << "exact             no: the best uniform cut that fits --memory-per-device\n";
    } else {
        std::cout << "exact             no: balanced partitions only (more than " << problem.max_partitions
                  << " partitions of B)";
        if (plan.stats.lower_bound > 0)
            std::cout << "; optimum >= " << std::setprecision(6) << plan.stats.lower_bound << " s, so within "
                      << std::setprecision(3) << 100 * (plan.objective / plan.stats.lower_bound - 1) << " %";
        std::cout << "\n";
    }
    std::cout << "solve time        " << std::setprecision(3) << plan.stats.solve_seconds << " s\n";
    std::cout << std::defaultfloat << std::setprecision(6);
    if (memory) {
        if (plan.slices != dp_plan.slices)
            std::cout << "memory            the DP's optimum (" << dp_plan.objective << " s) needs "
                      << bytes(all_alive(dp_plan)) << ": the plan above is "
                      << (memory_fallback ? "the best uniform cut that fits (the exact search stopped; not certified)"
                                          : "the best that fits (microbatches as the DP's)")
                      << "\n";
        std::cout << "memory            " << bytes(all_alive(plan)) << " per device"
                  << (has_budget ? " of " + bytes(budget) : std::string()) << " = static " << bytes(memory->static_bytes())
                  << " (" << memory->parameters() << " parameters x " << memory->options().bytes_per_parameter()
                  << " B: fp16 weights and gradients, fp32 master, Adam) + activations "
                  << bytes(memory->all_alive_bytes(plan.scheme())) << " (every unit alive: GPipe's first stage)\n";
        if (recompute)
            std::cout << "recompute         on: no plan fits without it; each unit keeps its stage input and "
                         "recomputes its forward in the backward (the K/V cache is kept)\n";
    }
    if (choice) {
        const auto& dp = choice->candidates.front();
        const auto& best = choice->candidates[choice->chosen];
        std::cout << "schedule          " << *schedule << ", " << choice->candidates.size()
                  << " plans simulated (the DP's and the best cuts of its microbatches by objective; "
                  << (choice->ranking.complete ? "all" : "not all") << " within " << 100 * ranking.within
                  << " % of it)"
                  << (analytic       ? ", link transfers separate"
                      : stage_models ? ", each stage priced by its own model, transfers inside t"
                                     : ", transfers inside t")
                  << "\n";
        auto show = [&](const char* label, const tpipe::scheduled_plan& c) {
            std::cout << label << "objective " << c.plan.objective << " s, simulated " << c.makespan << " s ("
                      << std::showpos << 100 * (c.makespan / c.plan.objective - 1) << std::noshowpos << " %)";
            if (memory) std::cout << ", peak " << bytes(c.peak_bytes);
            std::cout << "; slices " << runs(c.plan.slices.front()) << "\n";
        };
        show("  DP plan         ", dp);
        show("  chosen          ", best);
    }
    return 0;
}

tpipe::cli::registrar reg{"slice", "exact TeraPipe token/row slicing for a latency model (--help for options)",
                          run_slice};

} // namespace
