// train_gpt: trains the reference GPT on a text file (byte-level tokens) with a tpipe pipeline
// on CPU threads. Run with no argument to train on the bundled tiny corpus.
//
//   train_gpt --stages 2 --schedule terapipe-1f1b --slicer terapipe --steps 60 --check
//
// Flags: see usage() below. Exit status: 0 ok, 1 runtime failure (e.g. missing data file),
// 2 bad flags, 3 --check found a mismatch with the non-pipelined run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <tpipe/core/json.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "gpt/model.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/planning.hpp"

#ifndef TPIPE_GPT_DEFAULT_CORPUS
#define TPIPE_GPT_DEFAULT_CORPUS "examples/gpt/data/tiny_corpus.txt"
#endif

namespace {

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct options {
    gpt::config cfg;
    int batch = 4;
    int steps = 50;
    double lr = 1e-3;
    std::uint64_t seed = 1;
    int stages = 2;
    std::string schedule = "1f1b";
    int virtual_stages = 2;
    std::string slicer = "microbatch:4";
    std::int64_t granularity = 0;  // terapipe: 0 = seq_len / 16
    std::string data = TPIPE_GPT_DEFAULT_CORPUS;
    std::string trace;
    bool json = false;
    bool check = false;
    double check_tol = 1e-3;
    int threads = 0;  // 0: hardware threads
};

const char* usage_text =
    "usage: train_gpt [flags]\n"
    "  --layers N        transformer blocks (default 4)\n"
    "  --d-model N       model width (default 128)\n"
    "  --heads N         attention heads, dividing d-model (default 4)\n"
    "  --seq-len N       tokens per sequence (default 128)\n"
    "  --batch N         sequences per step (default 4)\n"
    "  --steps N         training steps (default 50)\n"
    "  --lr X            AdamW learning rate (default 1e-3; gradients clipped to norm 1)\n"
    "  --seed N          initialisation and data seed (default 1)\n"
    "  --stages P        pipeline ranks = CPU threads running stages (default 2)\n"
    "  --schedule NAME   gpipe, 1f1b, interleaved, zb-h1, zb-v, terapipe-gpipe, terapipe-1f1b (default 1f1b)\n"
    "  --virtual V       stages per rank for 'interleaved' (default 2)\n"
    "  --slicer SPEC     microbatch:M | tokens:l1,l2,... | grid:M:l1,l2,... | terapipe (default microbatch:4)\n"
    "  --granularity G   token granularity of the terapipe planner (default seq-len/16)\n"
    "  --threads N       compute threads in all (default: hardware threads), split over the ranks\n"
    "  --untied          separate LM head (default: tied to the token embedding)\n"
    "  --data FILE       training text, bytes are tokens (default: the bundled tiny corpus)\n"
    "  --trace FILE      write a Perfetto/Chrome trace of the last step\n"
    "  --json            one JSON line per step (step, loss, tokens_per_s, ...) and a summary line\n"
    "  --check           also train the non-pipelined model: step 1's loss and gradients must match within\n"
    "                    1e-5, the loss curve and final weights within --check-tol (exit status 3 if not)\n"
    "  --check-tol X     tolerance for the loss curve and final weights (default 1e-3; float rounding\n"
    "                    differences between slicings grow slowly over training steps)\n"
    "  --help            this text\n";

long long to_int(const std::string& flag, const std::string& v, long long lo)
{
    std::size_t pos = 0;
    long long x = 0;
    try {
        x = std::stoll(v, &pos);
    } catch (...) {
        pos = 0;
    }
    if (pos != v.size() || v.empty()) throw usage_error(flag + " needs an integer, got '" + v + "'");
    if (x < lo) throw usage_error(flag + " must be >= " + std::to_string(lo) + ", got " + v);
    return x;
}

double to_double(const std::string& flag, const std::string& v)
{
    std::size_t pos = 0;
    double x = 0;
    try {
        x = std::stod(v, &pos);
    } catch (...) {
        pos = 0;
    }
    if (pos != v.size() || v.empty() || !std::isfinite(x) || x <= 0)
        throw usage_error(flag + " needs a positive number, got '" + v + "'");
    return x;
}

std::vector<std::int64_t> to_list(const std::string& flag, const std::string& v)
{
    std::vector<std::int64_t> out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) out.push_back(to_int(flag, item, 1));
    if (out.empty()) throw usage_error(flag + " needs a comma-separated list of token counts");
    return out;
}

options parse(int argc, char** argv)
{
    options o;
    o.cfg.layers = 4;
    o.cfg.d_model = 128;
    o.cfg.heads = 4;
    o.cfg.seq_len = 128;
    for (int i = 1; i < argc; ++i) {
        const std::string f = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw usage_error(f + " needs a value");
            return argv[++i];
        };
        if (f == "--help" || f == "-h") {
            std::cout << usage_text;
            std::exit(0);
        } else if (f == "--layers") o.cfg.layers = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--d-model") o.cfg.d_model = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--heads") o.cfg.heads = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--seq-len") o.cfg.seq_len = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--batch") o.batch = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--steps") o.steps = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--lr") o.lr = to_double(f, value());
        else if (f == "--seed") o.seed = static_cast<std::uint64_t>(to_int(f, value(), 0));
        else if (f == "--stages") o.stages = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--schedule") o.schedule = value();
        else if (f == "--virtual") o.virtual_stages = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--slicer") o.slicer = value();
        else if (f == "--granularity") o.granularity = to_int(f, value(), 1);
        else if (f == "--threads") o.threads = static_cast<int>(to_int(f, value(), 1));
        else if (f == "--untied") o.cfg.tied = false;
        else if (f == "--data") o.data = value();
        else if (f == "--trace") o.trace = value();
        else if (f == "--json") o.json = true;
        else if (f == "--check") o.check = true;
        else if (f == "--check-tol") o.check_tol = to_double(f, value());
        else throw usage_error("unknown flag '" + f + "'");
    }
    try {
        o.cfg.validate();
    } catch (const std::invalid_argument& e) {
        throw usage_error(e.what());
    }
    const auto names = tpipe::schedule_names();
    if (std::find(names.begin(), names.end(), o.schedule) == names.end()) {
        std::string known;
        for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
        throw usage_error("unknown schedule '" + o.schedule + "'; known: " + known);
    }
    return o;
}

//! A fixed slicer from --slicer (everything but "terapipe").
tpipe::scheme fixed_scheme(const options& o)
{
    const tpipe::batch_shape shape{o.batch, o.cfg.seq_len};
    const std::string& s = o.slicer;
    try {
        if (s.rfind("microbatch:", 0) == 0)
            return tpipe::microbatch_slicer{static_cast<int>(to_int("--slicer microbatch:M", s.substr(11), 1))}.scheme(
                shape);
        if (s.rfind("tokens:", 0) == 0) return tpipe::token_slicer{to_list("--slicer tokens:", s.substr(7))}.scheme(shape);
        if (s.rfind("grid:", 0) == 0) {
            const auto colon = s.find(':', 5);
            if (colon == std::string::npos) throw usage_error("--slicer grid needs grid:M:l1,l2,...");
            return tpipe::grid_slicer{static_cast<int>(to_int("--slicer grid:M", s.substr(5, colon - 5), 1)),
                                      to_list("--slicer grid:M:", s.substr(colon + 1))}
                .scheme(shape);
        }
    } catch (const tpipe::error& e) {
        throw usage_error(std::string("--slicer ") + s + ": " + e.what());
    }
    throw usage_error("unknown slicer '" + s + "'; use microbatch:M, tokens:l1,l2,..., grid:M:l1,l2,... or terapipe");
}

std::string describe(const tpipe::scheme& sch)
{
    std::ostringstream out;
    bool first = true;
    for (const auto& m : sch.parts()) {
        if (!first) out << " | ";
        first = false;
        out << "rows [" << m.row_begin << "," << m.row_end << ") tokens";
        for (std::size_t i = 1; i < m.cuts.size(); ++i) out << ' ' << m.cuts[i] - m.cuts[i - 1];
    }
    return out.str();
}

//! ||a - b|| / ||b||
double relative_difference(const std::vector<float>& a, const std::vector<float>& b)
{
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        const double d = double(a[i]) - double(b[i]);
        num += d * d;
        den += double(b[i]) * double(b[i]);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

std::string clock_text(double s)
{
    const long long t = static_cast<long long>(std::max(0.0, s) + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", t / 60, t % 60);
    return buf;
}

int train(const options& o)
{
    std::ifstream in(o.data, std::ios::binary);
    if (!in) {
        std::cerr << "train_gpt: cannot read the data file '" << o.data << "'\n";
        return 1;
    }
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (static_cast<std::int64_t>(text.size()) < o.cfg.seq_len + 1) {
        std::cerr << "train_gpt: the data file '" << o.data << "' has " << text.size()
                  << " bytes; --seq-len " << o.cfg.seq_len << " needs at least " << o.cfg.seq_len + 1 << "\n";
        return 1;
    }
    const int ranks = o.stages;
    const int stages = ranks * tpipe::stages_per_rank(o.schedule, o.virtual_stages);
    if (stages > o.cfg.layers)
        throw usage_error("--stages " + std::to_string(ranks) + " with schedule " + o.schedule + " makes " +
                          std::to_string(stages) + " pipeline stages, but the model has " +
                          std::to_string(o.cfg.layers) + " layers: every stage needs at least one (raise --layers)");
    const int hw = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    const int threads_per_part = std::max(1, hw / ranks);
    const bool tty = !o.json && isatty(STDOUT_FILENO);

    gpt::parameters<float> params(o.cfg);
    params.init(o.seed);
    gpt::pipelined_model<float> model(params, stages, threads_per_part);
    gpt::adamw<float> opt(params, {.lr = o.lr});
    tpipe::cpu_engine engine(ranks);
    std::uint64_t data_rng = o.seed * 0x9E3779B97F4A7C15ULL + 7;

    // The units of every step: a fixed slicer, or the TeraPipe plan for this model's stages.
    tpipe::scheme units;
    double planned_T = 0;
    if (o.slicer == "terapipe") {
        const std::int64_t g = o.granularity > 0 ? o.granularity : std::max<std::int64_t>(1, o.cfg.seq_len / 16);
        if (o.cfg.seq_len % g != 0)
            throw usage_error("--granularity " + std::to_string(g) + " must divide --seq-len " +
                              std::to_string(o.cfg.seq_len));
        std::uint64_t probe_rng = data_rng;
        const auto probe = gpt::sample_batch(text, o.batch, o.cfg.seq_len, probe_rng);
        const auto grid = gpt::gpt_profile_grid(o.batch, o.cfg.seq_len, g);
        if (!o.json) std::cout << "profiling " << stages << " stage(s) over " << grid.tokens.size() << " lengths x "
                               << grid.contexts.size() + 1 << " contexts x " << grid.rows.size() << " row counts...\n";
        const auto latency = gpt::profile_parts(model, probe, grid);
        const auto plan = tpipe::plan_slices(
            latency, tpipe::slicing_problem{.stages = stages, .seq_len = o.cfg.seq_len, .batch = o.batch,
                                            .granularity = g});
        units = plan.scheme();
        planned_T = plan.objective;
        const auto& d = latency.parts.back().delta();
        if (o.json) {
            tpipe::json::object m{{"plan", describe(units)}, {"planned_T_s", plan.objective}, {"t_max_s", plan.t_max},
                                  {"units", static_cast<std::int64_t>(plan.units())}};
            tpipe::json::array t0;
            for (auto s : grid.tokens) t0.push_back(latency.seconds(1, s, 0));
            m["t_b1_c0_s"] = t0;
            tpipe::json::array lens;
            for (auto s : grid.tokens) lens.push_back(s);
            m["t_b1_c0_tokens"] = lens;
            m["delta_last_stage"] = tpipe::json::array{d[0], d[1], d[2], d[3]};
            std::cout << tpipe::json::dump(tpipe::json::value(std::move(m))) << "\n";
        } else {
            std::cout << "latency model (slowest stage, b=1, c=0):";
            for (auto s : grid.tokens) std::cout << " t(" << s << ")=" << latency.seconds(1, s, 0) * 1e3 << "ms";
            std::cout << "\ncontext term of the last stage: " << d[0] << " + " << d[1] << "*bs + " << d[2]
                      << "*bc + " << d[3] << "*bsc s\n";
            std::cout << "TeraPipe plan: " << describe(units) << "; planned T = " << plan.objective * 1e3
                      << " ms per iteration (" << plan.units() << " units, t_max " << plan.t_max * 1e3 << " ms)\n";
        }
    } else {
        units = fixed_scheme(o);
    }
    const auto sched = tpipe::make_schedule(o.schedule, o.virtual_stages);
    tpipe::program prog;
    try {
        prog = sched.program(tpipe::topology{.ranks = ranks}, units);
    } catch (const tpipe::error& e) {
        throw usage_error("schedule '" + o.schedule + "' cannot run " + describe(units) + " on " +
                          std::to_string(ranks) + " ranks: " + e.what());
    }
    if (!o.json)
        std::cout << "model: " << o.cfg.layers << " layers, d_model " << o.cfg.d_model << ", " << o.cfg.heads
                  << " heads, " << params.size() << " parameters; " << ranks << " rank(s), " << stages
                  << " stage(s), schedule " << o.schedule << ", " << threads_per_part << " thread(s) per stage\n"
                  << "units: " << describe(units) << "\n";

    // The non-pipelined reference for --check: same init, data and optimizer, one unit per step.
    std::unique_ptr<gpt::parameters<float>> ref;
    std::unique_ptr<gpt::adamw<float>> ref_opt;
    if (o.check) {
        ref = std::make_unique<gpt::parameters<float>>(o.cfg);
        ref->init(o.seed);
        ref_opt = std::make_unique<gpt::adamw<float>>(*ref, gpt::adamw_options{.lr = o.lr});
    }

    const double tokens_per_step = double(o.batch) * o.cfg.seq_len;
    double worst_loss = 0, elapsed = 0, first_loss = 0, last_loss = 0, first_grad_err = 0, first_loss_err = 0;
    std::vector<double> iter_times;
    tpipe::run_stats stats;
    for (int step = 1; step <= o.steps; ++step) {
        const auto b = gpt::sample_batch(text, o.batch, o.cfg.seq_len, data_rng);
        const auto t0 = std::chrono::steady_clock::now();
        tpipe::run_options ro;
        ro.trace = !o.trace.empty() && step == o.steps;  // the trace file shows the last step
        const double loss = model.step(b, prog, engine, &stats, ro);
        opt.step(params);
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        elapsed += dt;
        iter_times.push_back(stats.time);
        if (step == 1) first_loss = loss;
        last_loss = loss;
        double ref_loss = 0;
        if (ref) {
            ref_loss = gpt::full_step(*ref, b, hw);
            ref_opt->step(*ref);
            worst_loss = std::max(worst_loss, std::abs(loss - ref_loss) / std::abs(ref_loss));
            if (step == 1) {  // same weights, same batch: the pure pipelined-equals-sequential check
                first_loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
                first_grad_err = relative_difference(params.grad, ref->grad);
            }
        }
        const double tps = tokens_per_step * step / elapsed;
        if (o.json) {
            tpipe::json::object line{{"step", step}, {"loss", loss}, {"tokens_per_s", tokens_per_step / dt},
                                     {"step_s", dt}, {"pipeline_s", stats.time}};
            if (ref) line["reference_loss"] = ref_loss;
            std::cout << tpipe::json::dump(tpipe::json::value(std::move(line))) << std::endl;
        } else {
            const double eta = elapsed / step * (o.steps - step);
            char buf[200];
            std::snprintf(buf, sizeof buf, "step %4d/%d  loss %.4f  %8.0f tok/s  ETA %s", step, o.steps, loss, tps,
                          clock_text(eta).c_str());
            // A kept line every ~5% of the steps (the loss curve); on a terminal the line in
            // between is rewritten in place.
            const bool keep = step == 1 || step == o.steps || step % std::max(1, o.steps / 20) == 0;
            const std::string ref_text = ref ? "  (non-pipelined " + std::to_string(ref_loss) + ")" : std::string();
            if (keep)
                std::cout << (tty ? "\r\033[K" : "") << buf << ref_text << "\n" << std::flush;
            else if (tty)
                std::cout << "\r\033[K" << buf << std::flush;
        }
    }
    if (!o.trace.empty()) {
        std::ofstream tr(o.trace);
        if (!tr) {
            std::cerr << "train_gpt: cannot write the trace file '" << o.trace << "'\n";
            return 1;
        }
        tr << stats.trace("train_gpt last step");
    }
    std::vector<double> sorted = iter_times;
    std::sort(sorted.begin(), sorted.end());
    const double median_iter = sorted[sorted.size() / 2];
    tpipe::json::object summary{{"summary", true},
                                {"steps", o.steps},
                                {"first_loss", first_loss},
                                {"last_loss", last_loss},
                                {"tokens_per_s", tokens_per_step * o.steps / elapsed},
                                {"median_pipeline_s", median_iter},
                                {"schedule", o.schedule},
                                {"ranks", ranks},
                                {"stages", stages},
                                {"units", describe(units)}};
    if (planned_T > 0) {
        summary["planned_T_s"] = planned_T;
        summary["measured_over_planned"] = median_iter / planned_T;
    }
    int status = 0;
    if (ref) {
        const double werr = relative_difference(params.value, ref->value);
        const bool ok = first_loss_err <= 1e-5 && first_grad_err <= 1e-5 && worst_loss <= o.check_tol &&
                        werr <= o.check_tol;
        summary["check_step1_loss_rel"] = first_loss_err;
        summary["check_step1_grad_rel"] = first_grad_err;
        summary["check_loss_rel"] = worst_loss;
        summary["check_weights_rel"] = werr;
        summary["check_ok"] = ok;
        {  // which tensor drifted most (diagnostics)
            double worst_t = -1;
            std::string name;
            for (const auto& t : params.lay.tensors) {
                const std::vector<float> a(params.value.begin() + t.offset, params.value.begin() + t.offset + t.size());
                const std::vector<float> b(ref->value.begin() + t.offset, ref->value.begin() + t.offset + t.size());
                const double e = relative_difference(a, b);
                if (e > worst_t) worst_t = e, name = t.name;
            }
            summary["check_worst_tensor"] = name + " " + std::to_string(worst_t);
        }
        if (!o.json)
            std::cout << "check against the non-pipelined run: step 1 loss " << first_loss_err << ", gradients "
                      << first_grad_err << " (tolerance 1e-5); loss curve " << worst_loss << ", final weights "
                      << werr << " (tolerance " << o.check_tol << ") relative difference: "
                      << (ok ? "MATCH" : "MISMATCH") << "\n";
        if (!ok) status = 3;
    }
    if (o.json) {
        std::cout << tpipe::json::dump(tpipe::json::value(std::move(summary))) << "\n";
    } else {
        std::cout << "loss " << first_loss << " -> " << last_loss << "; " << tokens_per_step * o.steps / elapsed
                  << " tokens/s; median pipeline iteration " << median_iter * 1e3 << " ms";
        if (planned_T > 0) std::cout << " (planned " << planned_T * 1e3 << " ms, ratio " << median_iter / planned_T << ")";
        std::cout << "\n";
    }
    return status;
}

} // namespace

int main(int argc, char** argv)
{
    try {
        return train(parse(argc, argv));
    } catch (const usage_error& e) {
        std::cerr << "train_gpt: " << e.what() << "\n(run train_gpt --help for the flags)\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "train_gpt: " << e.what() << "\n";
        return 1;
    }
}
