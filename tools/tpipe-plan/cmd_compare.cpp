// tpipe-plan compare: the same pipeline under every schedule, timelines one under another and a
// summary table — the first thing to look at when choosing a schedule.
#include <filesystem>
#include <iomanip>
#include <iostream>

#include "command.hpp"
#include "sim_options.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/sim/svg.hpp"
#include "tpipe/sim/text_timeline.hpp"

namespace tpipe::cli {
namespace {

int compare_command(flag_reader& a)
{
    if (a.flag("--help")) {
        std::cout << "usage: tpipe-plan compare [--stages P] [--microbatches M] [--slices S] [--f X --b Y --w Z]\n"
                     "                          [--comm C] [--svg-dir DIR]\n\n"
                     "Simulates every registered schedule (those taking V with V = 2; terapipe-* with S token\n"
                     "slices, default 4) on P ranks (default 4) and M microbatches (default 8) and prints their\n"
                     "timelines; a schedule that does not take the size is listed as skipped. The costs\n"
                     "are those of one rank's share of the model, so a rank holding V stages runs each at 1/V.\n";
        return 0;
    }
    auto base = read_pipeline(a, false);
    const int token_slices = a.value("--slices") ? base.slices : 4;
    auto costs = read_costs(a, base);
    const auto svg_dir = a.value("--svg-dir");
    a.finish();
    // The limit holds for the largest program compared (token slices and virtual stages expand
    // it), checked before any is built.
    for (const auto& name : schedule_names(true))
        check_size(base, stages_per_rank(name, base.virtual_stages), name.rfind("terapipe-", 0) == 0 ? token_slices : 1);
    if (svg_dir) std::filesystem::create_directories(*svg_dir);

    struct row {
        std::string name;
        double makespan, bubble, peak;
    };
    std::vector<row> rows;
    for (const auto& name : schedule_names(true)) {
        auto o = base;
        o.schedule = name;
        o.slices = name.rfind("terapipe-", 0) == 0 ? token_slices : 1;
        program prog;
        try {
            prog = build_program(o);
        } catch (const invalid_argument& e) {  // a size this schedule does not take
            std::cout << "== " << name << ": skipped (" << e.what() << ")\n\n";
            continue;
        }
        // The same model on every schedule: a rank holding V stages runs 1/V of its layers in each.
        const int per_rank = stages_per_rank(name, o.virtual_stages);
        auto c = costs;
        c.f /= per_rank;
        c.b /= per_rank;
        c.w /= per_rank;
        c.tokens_per_microbatch = o.slices;
        const auto sim = simulate(prog, c);
        // Activation memory in microbatches of a whole rank: a unit holds 1/(V*S) of one.
        double peak = 0;
        for (int p : sim.peak_activations) peak = std::max(peak, p / double(per_rank * o.slices));
        std::string title = name + (o.slices > 1 ? " (" + std::to_string(o.slices) + " token slices)" : "");
        std::cout << "== " << title << "\n" << text_timeline(sim.events, sim.ranks) << "\n";
        if (svg_dir) write_file(*svg_dir + "/" + name + ".svg", svg_timeline(sim.events, sim.ranks, title));
        rows.push_back({title, sim.makespan, sim.bubble_fraction, peak});
    }
    std::cout << std::left << std::setw(34) << "schedule" << std::right << std::setw(10) << "makespan" << std::setw(9)
              << "bubble" << std::setw(34) << "peak activations (microbatches)" << "\n";
    for (const auto& r : rows)
        std::cout << std::left << std::setw(34) << r.name << std::right << std::fixed << std::setprecision(2)
                  << std::setw(10) << r.makespan << std::setw(8) << r.bubble * 100 << "%" << std::setw(34) << r.peak
                  << "\n";
    return 0;
}

registrar reg{"compare", "simulate every schedule on the same pipeline, side by side", compare_command};

} // namespace
} // namespace tpipe::cli
