// tpipe-plan run: execute a schedule's program on CPU threads (tpipe::cpu_engine) with stages
// that spin for a fixed time per action, and compare what really ran with the simulator.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <iomanip>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "command.hpp"
#include "sim_options.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/sim/text_timeline.hpp"

namespace tpipe::cli {
namespace {

const char* help = R"(usage: tpipe-plan run --schedule NAME --stages P --microbatches M --spin-us U [options]

Runs the schedule's program on CPU threads (tpipe::cpu_engine, one device per rank) with
stages that spin U microseconds in every compute action (F, B, I, W), and compares the measured
iteration time with the simulated makespan of the same program (every compute costs U, transfers 0).

  --schedule NAME     gpipe, 1f1b, interleaved, zb-h1, zb-v, terapipe-gpipe, terapipe-1f1b
  --stages P          pipeline ranks (interleaved places V stages per rank, zb-v two)
  --microbatches M    microbatches per iteration
  --virtual V         stages per rank for interleaved (default 2)
  --slices S          token slices per microbatch (required by terapipe-*)
  --spin-us U         busy time of every compute action, in microseconds (0: empty stages)
  --devices D         devices (default P); rank r runs on device r mod D
  --threads T         loop threads driving the devices (default: min(D, hardware threads));
                      devices share threads in contiguous blocks
  --iterations K      measured iterations after the warm-up (default 5); the median is reported
  --idle-spin-us S    how long an idle loop spins before it sleeps (default: 2000 when the
                      threads fit the cores, else 50)
  --json              print one JSON object instead of the timelines (actions are then not
                      traced, unless --trace is given)
  --trace FILE        write a Perfetto/Chrome trace of the median iteration as it really ran

A warm-up of at least 0.3 s comes first. Reports: measured (s), simulated (s), efficiency = simulated / measured,
overhead_ns_per_action = (measured - simulated) / actions, over all actions of the lowered program.
)";

//! Busy-waits for d (a stand-in for compute that occupies its core).
inline void spin(std::chrono::nanoseconds d)
{
    if (d.count() <= 0) return;
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
}

struct spin_stage {
    using input = int;
    using output = int;
    std::chrono::nanoseconds t{0};
    int forward(const unit&, int x)
    {
        spin(t);
        return x + 1;
    }
    int backward(const unit&, int g)
    {
        spin(t);
        return g;
    }
    int backward_input(const unit&, int g)
    {
        spin(t);
        return g;
    }
    void backward_weight(const unit&) { spin(t); }
};

//! Every compute action costs `t` seconds; transfers are free (the local channel moves an int).
struct per_action_costs {
    double t = 0;
    double compute(op kind, int, const unit&) const { return is_compute(kind) ? t : 0; }
    double transfer(op, int, int, const unit&) const { return 0; }
};

struct measured {
    std::vector<double> times;
    run_stats median;
};

measured run_spin(const program& prog, cpu_engine& eng, run_options opts, std::chrono::nanoseconds t, int iterations)
{
    uniform_pipeline<spin_stage> pipe(std::vector<spin_stage>(static_cast<std::size_t>(prog.stages()), spin_stage{t}));
    runner r(pipe, prog, eng, std::move(opts));
    io_for<decltype(pipe)> io;
    io.source = [](const unit& u) { return u.microbatch; };
    // Warm-up: storage allocated, and the OS has spread the new loop threads over the cores
    // (on a 2-vCPU VM both can share one core for the first ~0.2 s, doubling the time).
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    do r.run(io);
    while (std::chrono::steady_clock::now() < warm_until);
    std::vector<run_stats> all;
    for (int k = 0; k < iterations; ++k) all.push_back(r.run(io));
    std::vector<std::size_t> order(all.size());
    for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return all[a].time < all[b].time; });
    measured m;
    for (const auto& s : all) m.times.push_back(s.time);
    m.median = std::move(all[order[order.size() / 2]]);
    return m;
}

//! Longest run (simulated makespan x iterations) the command starts.
constexpr double max_run_seconds = 600;

int run_command(flag_reader& a)
{
    if (a.flag("--help")) {
        std::cout << help;
        return 0;
    }
    const auto opts = read_pipeline(a);
    const auto spin_us = a.value("--spin-us");
    if (!spin_us) throw invalid_argument("missing --spin-us U (busy time of every compute action, microseconds)");
    const double us = flag_reader::parse<double>("--spin-us", *spin_us, 0, 1e6);
    const int devices = a.number<int>("--devices", opts.ranks, 1, opts.ranks);  // a device beyond the ranks idles
    const int threads = a.number<int>("--threads", 0, 0, devices);
    const int iterations = a.number<int>("--iterations", 5, 1, 10'000);
    const auto idle_spin = a.value("--idle-spin-us");
    const bool as_json = a.flag("--json");
    const auto trace = a.value("--trace");
    a.finish();
    distinct_outputs({{"--trace", trace}});

    const program prog = lower(build_program(opts));
    const simulation sim = simulate(prog, per_action_costs{us * 1e-6});
    if (sim.makespan * iterations > max_run_seconds)
        throw invalid_argument("the run would spin for about " + std::to_string(static_cast<long long>(sim.makespan * iterations)) +
                               " s (simulated makespan x --iterations); tpipe-plan run spins at most " +
                               std::to_string(static_cast<int>(max_run_seconds)) + " s: lower --spin-us or --iterations");
    cpu_engine::options eo;
    eo.threads = threads;
    if (idle_spin) {
        const double s = flag_reader::parse<double>("--idle-spin-us", *idle_spin, 0, 1e6);
        eo.idle = cpu_engine::default_loop_options(threads == 0 ? cpu_engine::default_threads(devices) : threads);
        eo.idle->spin = std::chrono::nanoseconds(static_cast<long long>(s * 1e3));
    }
    cpu_engine eng(devices, eo);
    run_options ro;
    ro.trace = !as_json || trace.has_value();
    for (int r = 0; r < prog.ranks; ++r) ro.device_of_rank.push_back(r % devices);
    const auto t = std::chrono::nanoseconds(static_cast<long long>(us * 1e3));
    const measured m = run_spin(prog, eng, ro, t, iterations);

    const double real = m.median.time;
    const double actions = static_cast<double>(prog.size());
    const double efficiency = real > 0 ? sim.makespan / real : 0;
    const double overhead_ns = (real - sim.makespan) / actions * 1e9;
    const std::string title = opts.schedule + ", P=" + std::to_string(opts.ranks) + ", M=" +
                              std::to_string(opts.microbatches) +
                              (opts.slices > 1 ? ", S=" + std::to_string(opts.slices) : std::string()) +
                              ", spin " + *spin_us + " us";
    if (trace) write_file(*trace, chrome_trace(m.median.events, m.median.ranks, title + " (measured)"));

    if (as_json) {
        json::array busy, peak, times;
        for (double b : m.median.busy) busy.push_back(b);
        for (int p : m.median.peak_activations) peak.push_back(p);
        for (double x : m.times) times.push_back(x);
        std::cout << json::dump(json::object{
                         {"schedule", opts.schedule},
                         {"ranks", opts.ranks},
                         {"stages", prog.stages()},
                         {"devices", devices},
                         {"threads", eng.threads()},
                         {"traced", ro.trace},
                         {"microbatches", opts.microbatches},
                         {"slices", opts.slices},
                         {"spin_us", us},
                         {"actions", prog.size()},
                         {"iterations", iterations},
                         {"measured", real},
                         {"measured_all", times},
                         {"simulated", sim.makespan},
                         {"efficiency", efficiency},
                         {"overhead_ns_per_action", overhead_ns},
                         {"busy", busy},
                         {"peak_activations", peak},
                     })
                  << "\n";
        return 0;
    }
    std::cout << title << "\n\nsimulated:\n"
              << text_timeline(sim.events, sim.ranks) << "\nmeasured (median of " << iterations << "):\n"
              << text_timeline(m.median.events, m.median.ranks) << "\n"
              << std::fixed << std::setprecision(6) << "measured " << real << " s   simulated " << sim.makespan
              << " s   efficiency " << std::setprecision(4) << efficiency << "   overhead_ns_per_action "
              << std::setprecision(1) << overhead_ns << "   (" << prog.size() << " actions, " << devices
              << " devices on " << eng.threads() << " threads)\n";
    return 0;
}

static registrar reg{"run", "run a schedule on CPU threads with spinning stages and compare with the simulator",
                     run_command};

} // namespace
} // namespace tpipe::cli
