// tpipe_soak: many iterations of small pipelines with random schedules, slicers and placements,
// in two phases: through long-lived runners (one per configuration, reused), and through fresh
// ones (pipeline, engine and runner built and destroyed every iteration). Every iteration's
// outputs must equal the sequential run of the same stages. Prints, per phase, the resident set
// size (RSS) after the first tenth of the iterations and at the end, and the mean time per
// iteration of the first and the last 1000 (or tenth).
//
//   tpipe_soak [--iterations N] [--seed S] [--check-rss]
//
// --check-rss: exit status 1 when a phase's RSS grew by more than 8 MiB after its first tenth
// (allocator warm-up), i.e. when memory leaks per iteration. Time is reported, never asserted.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "../exec/pipes.hpp"
#include "tpipe/core/checked.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

using pipe_t = tpipe::uniform_pipeline<synth::stage<true>>;

long rss_kib()
{
    std::ifstream statm("/proc/self/statm");
    long pages = 0, resident = 0;
    statm >> pages >> resident;
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

//! One random pipeline: schedule, units, and a placement of ranks on devices.
struct config {
    std::string schedule;
    int ranks = 1, devices = 1;
    tpipe::program prog;
    std::vector<int> device_of_rank;
};

config random_config(std::mt19937_64& rng)
{
    static const auto names = tpipe::schedule_names();
    for (;;) {
        config c;
        c.schedule = names[rng() % names.size()];
        c.ranks = 1 + static_cast<int>(rng() % 4);
        const int rows = 1 + static_cast<int>(rng() % 8), seq = 1 + static_cast<int>(rng() % 6);
        tpipe::scheme units;
        try {
            switch (rng() % 3) {
            case 0: units = tpipe::microbatch_slicer{1 + static_cast<int>(rng() % rows)}.scheme({rows, seq}); break;
            case 1: units = tpipe::uniform_grid_slicer{1 + static_cast<int>(rng() % rows), 1 + static_cast<int>(rng() % seq)}.scheme({rows, seq}); break;
            default: {
                std::vector<std::int64_t> lengths;
                for (int left = seq; left > 0;) {
                    const int l = 1 + static_cast<int>(rng() % left);
                    lengths.push_back(l);
                    left -= l;
                }
                units = tpipe::token_slicer{lengths}.scheme({1, seq});
            }
            }
            c.prog = tpipe::make_schedule(c.schedule, 2).program(tpipe::topology{c.ranks}, units);
        } catch (const tpipe::error&) {
            continue;  // a schedule that cannot run these units on these ranks: draw again
        }
        c.devices = 1 + static_cast<int>(rng() % c.ranks);
        for (int r = 0; r < c.ranks; ++r) c.device_of_rank.push_back(static_cast<int>(rng() % c.devices));
        return c;
    }
}

//! Runs one iteration of `c` on `pipe` through `r` and checks it against the sequential run.
template <class Runner>
bool iterate(const config& c, pipe_t& pipe, Runner& r)
{
    for (auto* s : synth::stage_list(pipe)) s->new_iteration();
    std::vector<synth::vec> outputs(c.prog.units.units());
    tpipe::io_for<pipe_t> io;
    io.source = synth::source;
    io.output_grad = [&](const tpipe::unit& u, synth::vec&& y) {
        outputs[c.prog.units.index(u.microbatch, u.slice)] = y;
        return synth::loss_grad(y);
    };
    r.run(io);
    auto ref = synth::make_uniform<true>(c.prog.stages());
    return synth::sequential(ref, c.prog.units).outputs == outputs;
}

struct phase_figures {
    long rss_start = 0, rss_end = 0;
    double first_us = 0, last_us = 0;
    bool correct = true;
};

template <class Step>
phase_figures run_phase(const char* name, int iterations, Step step)
{
    phase_figures f;
    const int window = std::max(1, std::min(1000, iterations / 10));
    std::vector<double> us;
    us.reserve(static_cast<std::size_t>(iterations));
    for (int i = 0; i < iterations; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        f.correct = step() && f.correct;
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
        if (i + 1 == window) f.rss_start = rss_kib();
    }
    f.rss_end = rss_kib();
    const auto mean = [&](std::size_t from) {
        double s = 0;
        for (std::size_t k = from; k < from + static_cast<std::size_t>(window); ++k) s += us[k];
        return s / window;
    };
    f.first_us = mean(0);
    f.last_us = mean(us.size() - static_cast<std::size_t>(window));
    std::printf("%-14s %d iterations: RSS %ld KiB after the first %d, %ld KiB at the end (%+ld KiB); "
                "%.1f us per iteration over the first %d, %.1f us over the last %d; outputs %s\n",
                name, iterations, f.rss_start, window, f.rss_end, f.rss_end - f.rss_start, f.first_us, window,
                f.last_us, window, f.correct ? "equal the sequential run" : "DIFFER from the sequential run");
    std::fflush(stdout);
    return f;
}

} // namespace

int main(int argc, char** argv)
{
    int iterations = 10000;
    std::uint64_t seed = 1;
    bool check_rss = false;
    try {
        for (int i = 1; i < argc; ++i) {
            const std::string f = argv[i];
            if (f == "--check-rss") check_rss = true;
            else if (f == "--iterations" && i + 1 < argc) iterations = tpipe::parse_integer<int>(f, argv[++i], 10, 10'000'000);
            else if (f == "--seed" && i + 1 < argc) seed = tpipe::parse_integer<std::uint64_t>(f, argv[++i]);
            else throw tpipe::invalid_argument("unknown argument '" + f + "'; use --iterations N, --seed S, --check-rss");
        }
    } catch (const tpipe::error& e) {
        std::fprintf(stderr, "tpipe_soak: %s\n", e.what());
        return 2;
    }
    std::mt19937_64 rng(seed);

    // Phase 1: 16 configurations, each with its pipeline, engine and runner built once.
    struct live {
        config c;
        pipe_t pipe;
        tpipe::cpu_engine eng;
        std::unique_ptr<tpipe::runner<pipe_t, tpipe::cpu_engine>> r;
        explicit live(config cfg)
            : c(std::move(cfg)), pipe(synth::make_uniform<true>(c.prog.stages())), eng(c.devices)
        {
            tpipe::run_options o;
            o.device_of_rank = c.device_of_rank;
            r = std::make_unique<tpipe::runner<pipe_t, tpipe::cpu_engine>>(pipe, c.prog, eng, o);
        }
    };
    std::vector<std::unique_ptr<live>> pool;
    for (int k = 0; k < 16; ++k) pool.push_back(std::make_unique<live>(random_config(rng)));
    const auto reused = run_phase("reused runners", iterations, [&] {
        live& l = *pool[rng() % pool.size()];
        return iterate(l.c, l.pipe, *l.r);
    });
    pool.clear();

    // Phase 2: everything built and destroyed every iteration.
    const auto fresh = run_phase("fresh runners", iterations, [&] {
        const config c = random_config(rng);
        auto pipe = synth::make_uniform<true>(c.prog.stages());
        tpipe::cpu_engine eng(c.devices);
        tpipe::run_options o;
        o.device_of_rank = c.device_of_rank;
        tpipe::runner<pipe_t, tpipe::cpu_engine> r(pipe, c.prog, eng, o);
        return iterate(c, pipe, r);
    });

    int status = reused.correct && fresh.correct ? 0 : 1;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    // The sanitizers keep freed memory in quarantine (and shadow it): RSS grows by design there,
    // and their leak check at exit replaces this one.
    if (check_rss) std::printf("--check-rss: not checked under a sanitizer (its quarantine holds freed memory)\n");
    check_rss = false;
#endif
    constexpr long max_growth_kib = 8 * 1024;
    for (const auto* f : {&reused, &fresh})
        if (check_rss && f->rss_end - f->rss_start > max_growth_kib) {
            std::printf("RSS grew by %ld KiB (more than %ld KiB) after the warm-up: memory leaks per iteration\n",
                        f->rss_end - f->rss_start, max_growth_kib);
            status = 1;
        }
    return status;
}
