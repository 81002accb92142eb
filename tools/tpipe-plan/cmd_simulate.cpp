// tpipe-plan simulate: build a schedule's program (or read any program from CSV), simulate it
// with uniform per-stage costs, print its timeline and statistics (or JSON), and optionally
// write trace, SVG and CSV files.
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "command.hpp"
#include "sim_options.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/sim/svg.hpp"
#include "tpipe/sim/text_timeline.hpp"
#include "tpipe/schedule/validate.hpp"

namespace tpipe::cli {
namespace {

const char* help = R"(usage: tpipe-plan simulate --schedule NAME --stages P --microbatches M [options]
       tpipe-plan simulate --program FILE.csv [options]

  --program FILE      simulate a program read from CSV instead (PyTorch's dialect or tpipe's,
                      compute-only or lowered, e.g. written by PyTorch's _dump_csv); it says
                      ranks, stages and microbatches itself

  --schedule NAME     a registered schedule (listed below); PyTorch's class names work too
                      (Schedule1F1B, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble, ...)
  --stages P          pipeline ranks (interleaved, looped-bfs, interleaved-zb place V stages
                      per rank; zb-v and dualpipe-v two)
  --microbatches M    microbatches per iteration (interleaved*: max(1, M/P) rounds must divide M;
                      dualpipe-v: M >= 2P)
  --virtual V         stages per rank for the schedules that take V (default 2)
  --slices S          token slices per microbatch (required by terapipe-*; any schedule accepts it)
  --f X --b Y --w Z   per-stage time of a microbatch's forward, input-gradient and weight-gradient
                      backward (default 1 each); unsplit schedules run B = b + w; a token slice
                      costs its share of the microbatch
  --comm C            time of one transfer between ranks (default 0)
  --json              print one JSON object instead of the timeline
  --trace FILE        write a Perfetto/Chrome trace (open at ui.perfetto.dev)
  --svg FILE          write an SVG picture of the timeline
  --csv FILE          write the program as CSV (tpipe's dialect); add --lowered for sends/receives
  --pytorch           with --csv: write PyTorch 2.15's dialect (CRLF; a lowered program gets the
                      WAIT_SEND and REDUCE_GRAD actions PyTorch needs); refused for token slices
)";

program read_program_file(const std::string& path)
{
    const std::string text = read_file(path, "--program file");
    try {
        return from_csv(text);
    } catch (const parse_error& e) {
        throw parse_error(path + ": " + e.what());
    }
}

int simulate_command(flag_reader& a)
{
    if (a.flag("--help")) {
        std::cout << help << "\nschedules: " << schedule_list() << "\n";
        return 0;
    }
    const auto file = a.value("--program");
    pipeline_options opts;
    program prog;
    if (file) {
        for (const char* f : {"--schedule", "--stages", "--microbatches", "--virtual", "--slices"})
            if (a.value(f))
                throw invalid_argument(std::string(f) + " does not apply with --program: the program file says "
                                                        "its ranks, stages and microbatches");
        prog = read_program_file(*file);
        validate(prog);
        opts.schedule = *file;
        opts.ranks = prog.ranks;
        opts.microbatches = prog.units.microbatches();
        for (int m = 0; m < opts.microbatches; ++m) opts.slices = std::max(opts.slices, prog.units.slices(m));
    } else {
        opts = read_pipeline(a);
    }
    const auto costs = read_costs(a, opts);
    const bool as_json = a.flag("--json"), lowered = a.flag("--lowered"), pytorch = a.flag("--pytorch");
    const auto trace = a.value("--trace"), svg = a.value("--svg"), csv = a.value("--csv");
    a.finish();
    distinct_outputs({{"--trace", trace}, {"--svg", svg}, {"--csv", csv}});
    if ((lowered || pytorch) && !csv)
        throw invalid_argument(std::string(lowered ? "--lowered" : "--pytorch") +
                               " only changes what --csv writes; give --csv FILE too");
    if (lowered && prog.lowered()) throw invalid_argument("--lowered: the program is lowered already");

    if (!file) prog = build_program(opts);
    const simulation sim = simulate(prog, costs);
    const std::string title = opts.schedule + ", P=" + std::to_string(opts.ranks) + ", M=" +
                              std::to_string(opts.microbatches) +
                              (opts.slices > 1 ? ", S=" + std::to_string(opts.slices) : std::string());
    if (trace) write_file(*trace, chrome_trace(sim.events, sim.ranks, title));
    if (svg) write_file(*svg, svg_timeline(sim.events, sim.ranks, title));
    if (csv) {
        const program& out = lowered ? lower(prog) : prog;
        write_file(*csv, pytorch ? to_pytorch_csv(out) : to_csv(out));
    }

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

registrar reg{"simulate", "simulate a schedule or a program file and show its timeline, bubble and memory",
              simulate_command};

} // namespace
} // namespace tpipe::cli
