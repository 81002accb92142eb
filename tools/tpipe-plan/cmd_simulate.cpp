// tpipe-plan simulate: build a schedule's program, simulate it with uniform per-stage costs,
// print its timeline and statistics (or JSON), and optionally write trace, SVG and CSV files.
#include <iomanip>
#include <iostream>

#include "command.hpp"
#include "sim_options.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/sim/svg.hpp"
#include "tpipe/sim/text_timeline.hpp"

namespace tpipe::cli {
namespace {

const char* help = R"(usage: tpipe-plan simulate --schedule NAME --stages P --microbatches M [options]

  --schedule NAME     gpipe, 1f1b, interleaved, zb-h1, zb-v, terapipe-gpipe, terapipe-1f1b
  --stages P          pipeline ranks (interleaved places V stages per rank, zb-v two)
  --microbatches M    microbatches per iteration (interleaved: a multiple of P)
  --virtual V         stages per rank for interleaved (default 2)
  --slices S          token slices per microbatch (required by terapipe-*; any schedule accepts it)
  --f X --b Y --w Z   per-stage time of a microbatch's forward, input-gradient and weight-gradient
                      backward (default 1 each); unsplit schedules run B = b + w; a token slice
                      costs its share of the microbatch
  --comm C            time of one transfer between ranks (default 0)
  --json              print one JSON object instead of the timeline
  --trace FILE        write a Perfetto/Chrome trace (open at ui.perfetto.dev)
  --svg FILE          write an SVG picture of the timeline
  --csv FILE          write the program as CSV (PyTorch's format); add --lowered for sends/receives
)";

int simulate_command(args& a)
{
    if (a.flag("--help")) {
        std::cout << help;
        return 0;
    }
    const auto opts = read_pipeline(a);
    const auto costs = read_costs(a, opts);
    const bool as_json = a.flag("--json"), lowered = a.flag("--lowered");
    const auto trace = a.value("--trace"), svg = a.value("--svg"), csv = a.value("--csv");
    a.finish();
    if (lowered && !csv) throw invalid_argument("--lowered only changes what --csv writes; give --csv FILE too");

    const program prog = build_program(opts);
    const simulation sim = simulate(prog, costs);
    const std::string title = opts.schedule + ", P=" + std::to_string(opts.ranks) + ", M=" +
                              std::to_string(opts.microbatches) +
                              (opts.slices > 1 ? ", S=" + std::to_string(opts.slices) : std::string());
    if (trace) write_file(*trace, chrome_trace(sim.events, sim.ranks, title));
    if (svg) write_file(*svg, svg_timeline(sim.events, sim.ranks, title));
    if (csv) write_file(*csv, to_csv(lowered ? lower(prog) : prog));

    if (as_json) {
        json::array busy, peak;
        for (double b : sim.busy) busy.push_back(b);
        for (int p : sim.peak_activations) peak.push_back(p);
        std::cout << json::dump(json::object{
                         {"schedule", opts.schedule},
                         {"ranks", opts.ranks},
                         {"stages", prog.stages()},
                         {"microbatches", opts.microbatches},
                         {"slices", opts.slices},
                         {"actions", prog.size()},
                         {"makespan", sim.makespan},
                         {"bubble_fraction", sim.bubble_fraction},
                         {"busy", busy},
                         {"peak_activations", peak},
                     })
                  << "\n";
        return 0;
    }
    std::cout << title << "\n" << text_timeline(sim.events, sim.ranks) << std::fixed << std::setprecision(4)
              << "makespan " << sim.makespan << "   bubble " << sim.bubble_fraction * 100 << "%   peak activations";
    for (int p : sim.peak_activations) std::cout << " " << p;
    std::cout << "\n";
    return 0;
}

registrar reg{"simulate", "simulate a schedule and show its timeline, bubble and memory", simulate_command};

} // namespace
} // namespace tpipe::cli
