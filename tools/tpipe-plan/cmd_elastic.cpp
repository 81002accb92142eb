// tpipe-plan elastic: a PipeTransformer run planned and simulated epoch by epoch (AutoFreeze,
// AutoPipe, AutoDP, AutoCache), against the same run without freezing, with ablations.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "command.hpp"
#include "ratio.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/elastic/elastic_json.hpp"
#include "tpipe/elastic/elastic_plan.hpp"
#include "tpipe/elastic/elastic_presets.hpp"

namespace tpipe::cli {
//! --token-slicing: the four-case plan of PipeTransformer x TeraPipe (cmd_elastic_tokens.cpp).
int run_elastic_tokens(flag_reader& a);
} // namespace tpipe::cli

namespace {

constexpr const char* usage = R"(usage: tpipe-plan elastic --model vit-b16|FILE.json --devices N --alpha A --epochs E
                          [--stages K0] [--policy progressive|paper] [--lambda X|model]
                          [--strict] [--min-stages K] [--schedule gpipe|1f1b]
                          [--no-freeze] [--no-autopipe] [--no-autodp] [--no-autocache]
                          [--ablation] [--json | --lines]
       tpipe-plan elastic --token-slicing ... (PipeTransformer x TeraPipe; --token-slicing --help)

Plans an elastic (PipeTransformer) run and predicts every epoch's time with tpipe's
simulator: AutoFreeze picks the frozen blocks F; on a change AutoPipe re-partitions the
active units and halves the pipeline while its slowest stage stays <= the starting one;
AutoDP turns the freed devices into replicas; AutoCache serves the frozen prefix's output
from host memory once reading it is cheaper than recomputing it. Prints the speedup over the
same run without freezing (K0 stages, N / K0 replicas).

  --model          vit-b16 (built-in: ViT-B/16 on ImageNet, the paper's 2 x 8 RTX 5000
                   cluster) or an elastic model JSON file (docs/elastic.md)
  --devices N      devices of the job
  --alpha A        freeze degree, p/q or a decimal in (0, 1]
  --epochs E       epochs to plan (>= 1)
  --stages K0      initial pipeline length (default min(N, 8)); must divide N
  --policy         progressive (default) or paper (the bound alone: no gradients here)
  --lambda         frozen cost factor in partitioning and the halving test: 0 (default, as
                   the released code), 1/6 (the paper), or "model" (the frozen prefix's
                   modelled seconds this epoch)
  --strict         halve while strictly below (<) the starting slowest stage
  --min-stages K   never shrink the pipeline below K (default 1)
  --schedule       what the simulated iteration runs: gpipe (default, as the paper) or 1f1b
  --no-freeze      the baseline itself
  --no-autopipe    keep the starting pipeline and partition (implies no AutoDP, no AutoCache)
  --no-autodp      freed devices stay idle
  --no-autocache   the frozen prefix is recomputed every epoch
  --ablation       also plan the paper's ablation rows and print their speedups
  --json           one JSON object: the plan ("epochs": one re-plan record per epoch, with
                   "seconds", "cache" and "iterations"), "seconds", "baseline_seconds",
                   "speedup", and with --ablation "ablation": [{"name", "seconds", "speedup"}]
  --lines          one re-plan record per epoch, one JSON line each, as train_gpt --elastic
                   --json logs them (measured_throughput null)
)";

tpipe::json::object components_json(const tpipe::elastic::elastic_components& c)
{
    return {{"freeze", c.freeze}, {"autopipe", c.autopipe}, {"autodp", c.autodp}, {"autocache", c.autocache}};
}

tpipe::json::value plan_json(const tpipe::elastic::elastic_plan& p)
{
    tpipe::json::array epochs;
    for (const auto& e : p.epochs) {
        auto line = e.record.to_json().as_object();
        line["seconds"] = e.seconds;
        line["iteration_seconds"] = e.iteration_seconds;
        line["iterations"] = e.iterations;
        line["cache"] = tpipe::elastic::to_string(e.cache);
        line["replanned"] = e.replanned;
        epochs.emplace_back(std::move(line));
    }
    return tpipe::json::object{{"components", components_json(p.use)}, {"epochs", std::move(epochs)},
                               {"seconds", p.seconds}};
}

struct ablation_row {
    const char* name;
    tpipe::elastic::elastic_components use;
};
// The paper's Fig. 9 rows, in its order.
constexpr ablation_row ablation_rows[] = {
    {"freeze only", {true, false, false, false}},
    {"freeze + AutoPipe + AutoCache", {true, true, false, true}},
    {"freeze + AutoPipe + AutoDP", {true, true, true, false}},
    {"freeze + AutoPipe + AutoDP + AutoCache", {true, true, true, true}},
};

int run_elastic(tpipe::flag_reader& a)
{
    if (a.flag("--token-slicing")) return tpipe::cli::run_elastic_tokens(a);
    if (a.flag("--help") || a.flag("-h")) {
        std::cout << usage;
        return 0;
    }
    const auto model_arg = a.value("--model");
    tpipe::elastic::elastic_options o;
    o.devices = a.required_number<int>("--devices");
    const auto alpha_text = a.value("--alpha");
    o.epochs = a.required_number<int>("--epochs");
    const auto stages_text = a.value("--stages");
    const std::string policy = a.text("--policy", "progressive");
    const std::string lambda_text = a.text("--lambda", "0");
    o.strict = a.flag("--strict");
    o.min_stages = a.number<int>("--min-stages", 1);
    const std::string schedule = a.text("--schedule", "gpipe");
    o.use.freeze = !a.flag("--no-freeze");
    o.use.autopipe = !a.flag("--no-autopipe");
    o.use.autodp = !a.flag("--no-autodp");
    o.use.autocache = !a.flag("--no-autocache");
    const bool ablation = a.flag("--ablation");
    const bool as_json = a.flag("--json");
    const bool as_lines = a.flag("--lines");
    a.finish();
    if (as_json && as_lines) throw tpipe::invalid_argument("choose one of --json and --lines, not both");
    if (as_lines && ablation) throw tpipe::invalid_argument("--lines prints one plan; drop --ablation or use --json");
    if (!model_arg) throw tpipe::invalid_argument("missing required --model (vit-b16 or an elastic model JSON file)");
    if (!alpha_text) throw tpipe::invalid_argument("missing required --alpha A (p/q or a decimal in (0, 1])");
    if (o.devices < 1) throw tpipe::invalid_argument("--devices must be >= 1, got " + std::to_string(o.devices));
    o.initial_stages = stages_text ? tpipe::flag_reader::parse<int>("--stages", *stages_text) : std::min(o.devices, 8);
    if (o.initial_stages < 1 || o.devices % o.initial_stages != 0)
        throw tpipe::invalid_argument("--stages K0 = " + std::to_string(o.initial_stages) + " must be >= 1 and divide " +
                                      "--devices " + std::to_string(o.devices) + (stages_text ? "" : "; give --stages"));
    if (lambda_text != "model") o.lambda = tpipe::cli::parse_ratio("--lambda", lambda_text);
    if (schedule == "1f1b") o.schedule = tpipe::elastic::pipeline_schedule::one_f_one_b;
    else if (schedule != "gpipe") throw tpipe::invalid_argument("--schedule must be gpipe or 1f1b, got '" + schedule + "'");
    if (policy != "progressive" && policy != "paper")
        throw tpipe::invalid_argument("--policy must be progressive or paper, got '" + policy + "'");
    const auto alpha = tpipe::elastic::fraction::parse(*alpha_text);
    const bool preset = std::filesystem::path(*model_arg).extension() != ".json";
    const auto model = preset ? tpipe::elastic::presets::by_name(*model_arg) : tpipe::elastic::load_elastic_model(*model_arg);

    auto plan = [&](tpipe::elastic::elastic_components use) {
        auto opt = o;
        opt.use = use;
        if (policy == "paper") {
            tpipe::elastic::paper_freeze p(alpha);
            return tpipe::elastic::plan_elastic(model, opt, p);
        }
        tpipe::elastic::progressive_freeze p(alpha);
        return tpipe::elastic::plan_elastic(model, opt, p);
    };
    const auto result = plan(o.use);
    if (as_lines) {
        for (const auto& e : result.epochs) std::cout << e.record.to_json_line() << "\n";
        return 0;
    }
    const auto baseline = plan({false, false, false, false});
    const double speedup = baseline.seconds / result.seconds;

    if (as_json) {
        auto out = plan_json(result).as_object();
        out["model"] = model.name;
        out["devices"] = o.devices;
        out["initial_stages"] = o.initial_stages;
        out["alpha"] = alpha.str();
        out["policy"] = policy;
        out["lambda"] = o.lambda ? tpipe::json::value(*o.lambda) : tpipe::json::value("model");
        out["schedule"] = schedule;
        out["baseline_seconds"] = baseline.seconds;
        out["speedup"] = speedup;
        if (ablation) {
            tpipe::json::array rows;
            for (const auto& r : ablation_rows) {
                const double s = plan(r.use).seconds;
                rows.emplace_back(tpipe::json::object{{"name", r.name}, {"components", components_json(r.use)},
                                                      {"seconds", s}, {"speedup", baseline.seconds / s}});
            }
            out["ablation"] = std::move(rows);
        }
        std::cout << tpipe::json::dump(out) << "\n";
        return 0;
    }
    std::cout << "model " << model.name << ", " << o.devices << " devices, K0 = " << o.initial_stages
              << ", alpha = " << alpha.str() << " (" << policy << "), lambda = "
              << (o.lambda ? tpipe::json::dump(*o.lambda) : std::string("model")) << ", " << schedule << "\n";
    auto on = [](bool b) { return b ? "on" : "off"; };
    std::cout << "components: freeze " << on(result.use.freeze) << ", AutoPipe " << on(result.use.autopipe)
              << ", AutoDP " << on(result.use.autodp) << ", AutoCache " << on(result.use.autocache) << "\n\n";
    std::cout << "epoch  frozen  stages  replicas  microbatches  cache    seconds  samples/s\n";
    std::cout << std::fixed;
    for (const auto& e : result.epochs)
        std::cout << std::setw(5) << e.record.epoch << std::setw(8) << e.record.frozen << std::setw(8)
                  << e.record.stages << std::setw(10) << e.record.replicas << std::setw(14) << e.record.microbatches
                  << "  " << std::setw(6) << std::left << tpipe::elastic::to_string(e.cache) << std::right << std::setw(10)
                  << std::setprecision(0) << e.seconds << std::setw(11) << e.record.predicted_throughput << "\n";
    std::cout << std::setprecision(0) << "\ntotal " << result.seconds << " s, without freezing " << baseline.seconds
              << " s: speedup " << std::setprecision(2) << speedup << "x\n";
    if (ablation) {
        std::cout << "\nablation (speedup over no freezing)\n";
        for (const auto& r : ablation_rows)
            std::cout << "  " << std::setw(40) << std::left << r.name << std::right << std::setprecision(2)
                      << baseline.seconds / plan(r.use).seconds << "x\n";
    }
    return 0;
}

tpipe::cli::registrar reg{"elastic", "PipeTransformer elastic plan over epochs, simulated (--help)", run_elastic};

} // namespace
