// tpipe-plan elastic --token-slicing: PipeTransformer x TeraPipe at scale, simulated on tpipe's
// analytic latency model (tpipe/elastic/token_elastic_plan.hpp): four cases on the same model --
// no freezing, TeraPipe alone, PipeTransformer alone, both. An encoder (vit-b16) has no causal
// token order, so token slicing does not apply: it says so and plans PipeTransformer alone.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>

#include "command.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/elastic/elastic_plan.hpp"
#include "tpipe/elastic/elastic_presets.hpp"
#include "tpipe/elastic/token_elastic_plan.hpp"
#include "tpipe/plan/presets.hpp"

namespace tpipe::cli {

constexpr const char* token_usage = R"(usage: tpipe-plan elastic --token-slicing --model gpt3-13b|gpt3-175b|... --devices N --alpha A
                          --epochs E [--stages K0] [--seq-len L] [--batch B] [--granularity G]
                          [--device v100|a100|h100|h200] [--tensor-parallel T]
                          [--samples-per-epoch S] [--json]

Prices an elastic run four ways on one analytic latency model: no freezing; TeraPipe alone
(token slices planned by the DP); PipeTransformer alone (progressive freezing, AutoPipe,
AutoDP, AutoCache); both (each re-planned pipeline re-sliced for its depth). Assumptions:
docs/elastic.md. With --model vit-b16 token slicing does not apply (an encoder's tokens attend
to every token): it says so and falls back to PipeTransformer alone.

  --seq-len L            tokens per sequence (default 2048)
  --batch B              sequences per pipeline iteration (default 2)
  --granularity G        token cuts are multiples of G (default 16)
  --device D             (default v100, the TeraPipe paper's) with its usual link
  --tensor-parallel T    (default 8)
  --samples-per-epoch S  (default 16384)
)";

int run_elastic_tokens(tpipe::flag_reader& a)
{
    if (a.flag("--help") || a.flag("-h")) {
        std::cout << token_usage;
        return 0;
    }
    const auto model_arg = a.value("--model");
    const int devices = a.required_number<int>("--devices");
    const auto alpha_text = a.value("--alpha");
    const int epochs = a.required_number<int>("--epochs");
    const auto stages_text = a.value("--stages");
    const auto seq_len = a.number<std::int64_t>("--seq-len", 2048);
    const auto batch = a.number<std::int64_t>("--batch", 2);
    const auto granularity = a.number<std::int64_t>("--granularity", 16);
    const std::string device = a.text("--device", "v100");
    const int tp = a.number<int>("--tensor-parallel", 8);
    const auto samples = a.number<std::int64_t>("--samples-per-epoch", 16384);
    const bool as_json = a.flag("--json");
    a.finish();
    if (!model_arg) throw tpipe::invalid_argument("missing required --model (gpt3-13b, gpt3-175b, ... or vit-b16)");
    if (!alpha_text) throw tpipe::invalid_argument("missing required --alpha A (p/q or a decimal in (0, 1])");
    const auto alpha = tpipe::elastic::fraction::parse(*alpha_text);
    const int k0 = stages_text ? tpipe::flag_reader::parse<int>("--stages", *stages_text) : std::min(devices, 48);

    if (*model_arg == "vit-b16") {  // the fall-back: the existing elastic plan, cases none and PipeTransformer
        const auto model = tpipe::elastic::presets::by_name(*model_arg);
        tpipe::elastic::elastic_options o;
        o.devices = devices;
        o.initial_stages = k0;
        o.epochs = epochs;
        o.lambda = 0;  // tpipe-plan elastic's default
        tpipe::elastic::progressive_freeze p(alpha);
        const double none = [&] {
            auto q = o;
            q.use = {false, false, false, false};
            return tpipe::elastic::plan_elastic(model, q, p).seconds;
        }();
        const double pt = tpipe::elastic::plan_elastic(model, o, p).seconds;
        const std::string why = "token slicing does not apply to " + *model_arg +
                                ": an encoder's tokens attend to every token, so no slice can leave a stage before "
                                "the whole sequence has entered it; falling back to PipeTransformer alone";
        if (as_json) {
            tpipe::json::object out{{"model", *model_arg}, {"token_slicing", why},
                                    {"cases", tpipe::json::array{tpipe::json::object{{"case", "none"}, {"seconds", none}},
                                                                 tpipe::json::object{{"case", "PipeTransformer alone"},
                                                                                     {"seconds", pt}, {"speedup", none / pt}}}}};
            std::cout << tpipe::json::dump(out) << "\n";
        } else {
            std::cout << why << "\n" << std::fixed << std::setprecision(0) << "none " << none << " s; PipeTransformer alone "
                      << pt << " s (" << std::setprecision(2) << none / pt << "x); TeraPipe alone and both: not applicable\n";
        }
        return 0;
    }
    const bool file = std::filesystem::path(*model_arg).extension() == ".json";
    if (file) throw tpipe::invalid_argument("--token-slicing takes a built-in decoder model (gpt3-1b, gpt3-13b, gpt3-44b, "
                                            "gpt3-175b) or vit-b16, not a file");
    tpipe::elastic::token_elastic_options o;
    o.model = tpipe::presets::model(*model_arg);
    o.device = tpipe::presets::device(device);
    o.link = tpipe::presets::default_link(o.device);
    o.tensor_parallel = tp;
    o.devices = devices;
    o.initial_stages = k0;
    o.seq_len = seq_len;
    o.batch = batch;
    o.granularity = granularity;
    o.samples_per_epoch = samples;
    o.epochs = epochs;
    o.alpha = alpha;
    using tpipe::elastic::token_elastic_case;
    const token_elastic_case cases[] = {token_elastic_case::none, token_elastic_case::terapipe,
                                        token_elastic_case::pipetransformer, token_elastic_case::both};
    std::vector<tpipe::elastic::token_elastic_plan> plans;
    for (auto c : cases) plans.push_back(tpipe::elastic::plan_token_elastic(o, c));
    const double base = plans.front().seconds;
    if (as_json) {
        tpipe::json::array rows;
        for (const auto& p : plans) {
            tpipe::json::array eps;
            for (const auto& e : p.epochs)
                eps.emplace_back(tpipe::json::object{{"epoch", e.epoch}, {"frozen", e.frozen}, {"stages", e.stages},
                                                     {"replicas", e.replicas}, {"microbatches", e.microbatches},
                                                     {"max_slices", e.max_slices}, {"iteration_seconds", e.iteration_seconds},
                                                     {"cache_seconds", e.cache_seconds}, {"seconds", e.seconds}});
            rows.emplace_back(tpipe::json::object{{"case", tpipe::elastic::to_string(p.which)}, {"seconds", p.seconds},
                                                  {"speedup", base / p.seconds}, {"epochs", std::move(eps)}});
        }
        std::cout << tpipe::json::dump(tpipe::json::object{{"model", *model_arg}, {"device", device}, {"devices", devices},
                                                           {"initial_stages", k0}, {"seq_len", seq_len}, {"batch", batch},
                                                           {"alpha", alpha.str()}, {"cases", std::move(rows)}})
                  << "\n";
        return 0;
    }
    std::cout << "model " << *model_arg << " on " << device << " (tensor parallel " << tp << "), " << devices
              << " pipeline devices, K0 = " << k0 << ", " << seq_len << " tokens, batch " << batch << " per pipeline, alpha "
              << alpha.str() << ", " << epochs << " epochs of " << samples << " samples\n\n";
    std::cout << std::fixed;
    for (const auto& p : plans) {
        std::cout << std::left << std::setw(22) << tpipe::elastic::to_string(p.which) << std::right << std::setprecision(0)
                  << std::setw(10) << p.seconds << " s  " << std::setprecision(2) << base / p.seconds << "x   epochs:";
        for (const auto& e : p.epochs)
            std::cout << " [F" << e.frozen << " K" << e.stages << " D" << e.replicas << " " << e.microbatches << "mb x"
                      << e.max_slices << "]";
        std::cout << "\n";
    }
    return 0;
}

} // namespace tpipe::cli
