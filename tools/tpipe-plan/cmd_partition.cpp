// tpipe-plan partition: contiguous layers -> K stages minimising the slowest stage, exactly.
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "command.hpp"
#include "ratio.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/elastic/partition.hpp"

namespace {

constexpr const char* usage = R"(usage: tpipe-plan partition --costs c1,c2,... --stages K [--frozen F] [--lambda X] [--json]

Splits the units (layers or sublayers) into K contiguous stages with the smallest slowest
stage, exactly (dynamic programming; the released PipeTransformer code uses a greedy).

  --costs          cost of each unit, in order (parameters, seconds, ...), each >= 0
  --stages K       pipeline stages (>= 1); every stage gets at least one active unit
  --frozen F       the first F units are frozen: they stay on stage 0 (the first device runs
                   them, forward only) and cost lambda times their cost (default 0)
  --lambda X       frozen cost factor >= 0, a decimal or p/q (the paper's 1/6; default 0 as
                   the released code effectively uses)
  --json           {"boundaries": [0, c1, ..., n], "stage_costs": [...], "max_stage_cost": x}
)";

std::vector<double> parse_costs(const std::string& text)
{
    std::vector<double> out;
    std::stringstream in(text);
    std::string item;
    const std::string expects = "--costs expects c1,c2,... (finite numbers), got '" + text + "'";
    try {
        while (std::getline(in, item, ',')) out.push_back(tpipe::flag_reader::parse<double>("--costs", item));
    } catch (const tpipe::error& e) {
        throw tpipe::invalid_argument(expects + ": " + e.what());
    }
    if (out.empty() || text.back() == ',') throw tpipe::invalid_argument(expects);
    return out;
}

int run_partition(tpipe::flag_reader& a)
{
    if (a.flag("--help") || a.flag("-h")) {
        std::cout << usage;
        return 0;
    }
    const auto costs_text = a.value("--costs");
    const int stages = a.required_number<int>("--stages");
    const int frozen = a.number<int>("--frozen", 0);
    const auto lambda_text = a.value("--lambda");
    const bool as_json = a.flag("--json");
    a.finish();
    if (!costs_text) throw tpipe::invalid_argument("missing required --costs c1,c2,...");
    const auto costs = parse_costs(*costs_text);
    const double lambda = lambda_text ? tpipe::cli::parse_ratio("--lambda", *lambda_text) : 0.0;
    const auto p = tpipe::elastic::partition_layers(costs, stages, frozen, lambda);

    if (as_json) {
        tpipe::json::array cuts, stage_costs;
        for (int c : p.cuts) cuts.emplace_back(c);
        for (double c : p.stage_costs) stage_costs.emplace_back(c);
        std::cout << tpipe::json::dump(tpipe::json::object{{"boundaries", std::move(cuts)},
                                                           {"stage_costs", std::move(stage_costs)},
                                                           {"max_stage_cost", p.max_stage_cost}})
                  << "\n";
        return 0;
    }
    std::cout << "stage  units        cost\n";
    for (int s = 0; s < p.stages(); ++s)
        std::cout << std::setw(5) << s << "  [" << p.cuts[s] << ", " << p.cuts[s + 1] << ")" << std::setw(12)
                  << p.stage_costs[s] << "\n";
    std::cout << "slowest stage " << p.max_stage_cost << "\n";
    return 0;
}

tpipe::cli::registrar reg{"partition", "layers -> K stages minimising the slowest stage, exactly (--help)",
                          run_partition};

} // namespace
