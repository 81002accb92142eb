// train_libtorch_gpt: trains the libtorch GPT (gpt.hpp) pipelined by tpipe, or plainly.
//
//   train_libtorch_gpt --stages 2 --schedule zb-h1 --slicer grid:2:32,32 --steps 20 --check
//   mpirun -np 2 train_libtorch_gpt --transport mpi --stages 2 --check
//   mpirun -np 4 train_libtorch_gpt --transport mpi --tp 2 --stages 2 --check   (tensor x pipeline)
//   train_libtorch_gpt --elastic --devices 2 --epochs 3 --check      (PipeTransformer)
//
// Exit status: 0 ok, 1 failure, 2 bad flags, 3 --check found a difference from plain libtorch.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <exception>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#ifdef TPIPE_LIBTORCH_GPT_MPI
#include <tpipe/mpi/agree.hpp>
#include <tpipe/mpi/environment.hpp>
#endif

#include "../common/flags.hpp"
#include "../common/launch.hpp"
#include "training.hpp"

#include "cli/flag_reader.hpp"
#include <tpipe/core/file.hpp>
#include <tpipe/core/quote.hpp>
#include <tpipe/exec/fingerprint.hpp>

#ifndef TPIPE_LIBTORCH_GPT_DEFAULT_CORPUS
#define TPIPE_LIBTORCH_GPT_DEFAULT_CORPUS "apps/gpt/data/tiny_corpus.txt"
#endif

namespace {

using tpipe_examples::usage_error;

const char* usage_text =
    "usage: train_libtorch_gpt [flags]\n"
    "  --layers N --d-model N --heads N --seq-len N   model (default 4, 64, 4, 64)\n"
    "  --batch N         sequences per step (default 8)\n"
    "  --steps N         training steps (default 20)\n"
    "  --lr X            AdamW learning rate (default 1e-3)\n"
    "  --seed N          initialisation and data seed (default 1)\n"
    "  --stages P        pipeline ranks (default 2): a stage each, or V each where the schedule places V\n"
    "                    (interleaved, interleaved-zb, zb-v: 2; the model is cut into P x V stages)\n"
    "  --tp T            tensor ranks per stage (default 1): Megatron's split of attention heads, MLP features\n"
    "                    and vocabulary over T pipelines (threads) or T x P processes (mpi: mpirun -np T x P)\n"
    "  --schedule NAME   a runnable schedule of tpipe's registry: 1f1b, zb-h1, gpipe, ... (default 1f1b)\n"
    "  --slicer SPEC     microbatch:M | tokens:l1,l2,... | grid:M:l1,l2,... (default microbatch:4); with --elastic\n"
    "                    only terapipe: TeraPipe token slices re-planned for every pipeline depth\n"
    "  --granularity G   --elastic --slicer terapipe: token slices are multiples of G tokens (default seq-len/16)\n"
    "  --transport T     threads (default): a CPU thread per stage; mpi: an MPI process per stage\n"
    "                    (mpirun -np P); none: plain libtorch, no tpipe\n"
    "  --link L          with --transport mpi: the engine activations and gradients cross processes over:\n"
    "                    mpi (default) or ucx (UCX's tagged messages; MPI keeps the control plane)\n"
    "  --threads N       libtorch intra-op threads per process (default: libtorch's)\n"
    "  --data FILE       training text, bytes are tokens (default: apps/gpt's tiny corpus)\n"
    "  --check-slicing   first check that token slices give each stage's unsliced outputs (names the stage)\n"
    "  --mpi-progress on|off   --transport mpi: the MPI progress thread (default: on only where the node\n"
    "                    has more cores than processes)\n"
    "  --check           also train plain libtorch: losses and final weights must agree within --check-tol\n"
    "  --check-tol X     relative tolerance of --check (default 1e-5; with --elastic, derived from the run's\n"
    "                    plans: float32 epsilon x the partial sums regrouped over all steps, docs/elastic.md)\n"
    "  --watchdog S      stop a step that makes no progress for S seconds, naming what every rank waits for\n"
    "                    (default 60; 0: never); under MPI it also bounds the set-up before the first step\n"
    "  --trace FILE      write a Perfetto/Chrome trace of the last step (under --transport mpi, each process\n"
    "                    its own ranks' to FILE.process<k>)\n"
    "  --save DIR        save checkpoints under DIR (DIR/step-NNNNNNNN/: each stage's parameters and AdamW\n"
    "                    state, written by the process that runs it, committed by one atomic rename)\n"
    "  --save-every N    --save: a checkpoint every N steps (written in the background during the next step)\n"
    "  --keep K          --save: keep the newest K checkpoints (default 0: all)\n"
    "  --resume DIR      continue from a checkpoint (DIR: one, or a --save directory: its newest) up to --steps;\n"
    "                    --stages, --schedule, --slicer and --transport may differ from the saving run\n"
    "  --elastic         elastic pipelining (PipeTransformer, tpipe's elastic driver): start as one --devices-stage\n"
    "                    pipeline; as modules freeze (embeddings, blocks; never the head) the pipeline shortens\n"
    "                    and freed devices become data-parallel replicas; the frozen prefix's outputs are cached.\n"
    "                    One line per re-plan. --check: against plain libtorch with the same freezing and\n"
    "                    replica split at the same steps\n"
    "  --devices N       --elastic: devices (loop threads, or MPI processes: mpirun -np N) (default 2)\n"
    "  --alpha A         --elastic: freeze degree of the progressive policy (default 1/3)\n"
    "  --freeze-every S  --elastic: steps per freeze interval (default: one epoch of the text's windows)\n"
    "  --epochs E        --elastic: epochs to train when --steps is not given (default 3)\n"
    "  --max-frozen F    --elastic: most modules that may freeze (default: all but the head; 0: the baseline)\n"
    "  --cache-mb M      --elastic: AutoCache's host-memory budget, beyond it entries spill to disk (default 256)\n"
    "  --no-autopipe, --no-autodp, --no-autocache   --elastic ablations\n"
    "  --record-plan F   --elastic: write the planner's inputs (each module's measured seconds; with --slicer\n"
    "                    terapipe, the token latency tables) to F, so that --plan-from F reproduces the run\n"
    "  --plan-from F     --elastic: plan from the inputs --record-plan wrote to F instead of measuring them: the\n"
    "                    same plans, so the same weights as the recording run (docs/elastic.md)\n"
    "  --json            one JSON summary line\n";

struct flags {
    libtorch_gpt::options o;
    bool check = false, json = false;
    bool elastic = false, steps_given = false;
    tpipe::elastic::driver_options el;  // --elastic (steps set from --steps or --epochs)
    int epochs = 3;
    std::optional<bool> mpi_progress;
    double check_tol = 1e-5;
    bool check_tol_given = false;  //!< --elastic: else derived from the run's plans
};

flags parse(int argc, char** argv)
{
    tpipe::flag_reader r(argc, argv);  // tpipe-plan's and train_gpt's rules
    if (r.flag("--help") || r.flag("-h")) {
        std::cout << usage_text;
        std::exit(0);
    }
    flags f;
    constexpr int most = std::numeric_limits<int>::max();
    f.o.layers = r.number<std::int64_t>("--layers", f.o.layers, 1, most);
    f.o.d_model = r.number<std::int64_t>("--d-model", f.o.d_model, 1, most);
    f.o.heads = r.number<std::int64_t>("--heads", f.o.heads, 1, most);
    f.o.seq_len = r.number<std::int64_t>("--seq-len", f.o.seq_len, 1, most);
    f.o.batch = r.number("--batch", f.o.batch, 1, most);
    f.o.steps = r.number("--steps", f.o.steps, 1, most);
    f.o.lr = r.positive("--lr", f.o.lr);
    f.o.seed = r.number<std::uint64_t>("--seed", f.o.seed, 0);
    f.o.stages = r.number("--stages", f.o.stages, 1, most);
    f.o.tp = r.number("--tp", f.o.tp, 1, most);
    f.o.schedule = r.text("--schedule", f.o.schedule);
    f.o.slicer = r.text("--slicer", f.o.slicer);
    f.o.transport = r.text("--transport", f.o.transport);
    f.o.link = r.text("--link", f.o.link);
    f.o.threads = r.number("--threads", f.o.threads, 1, most);
    f.o.data = r.text("--data", TPIPE_LIBTORCH_GPT_DEFAULT_CORPUS);
    f.o.check_slicing = r.flag("--check-slicing");
    if (auto v = r.value("--mpi-progress")) {
        if (*v != "on" && *v != "off") throw usage_error("--mpi-progress takes on or off, got " + tpipe::quote(*v));
        f.mpi_progress = *v == "on";
    }
    f.check = r.flag("--check");
    f.check_tol = r.positive("--check-tol", f.check_tol);
    f.check_tol_given = r.given("--check-tol");
    f.o.watchdog = r.number("--watchdog", f.o.watchdog, 0, 86400);
    f.json = r.flag("--json");
    f.o.save = r.text("--save", f.o.save);
    f.o.save_every = r.number("--save-every", f.o.save_every, 1, most);
    f.o.keep = r.number("--keep", f.o.keep, 1, most);
    f.o.resume = r.text("--resume", f.o.resume);
    f.o.trace = r.text("--trace", "");
    f.elastic = r.flag("--elastic");
    const std::int64_t granularity = r.number<std::int64_t>("--granularity", 0, 1);
    f.steps_given = r.given("--steps");
    f.el.devices = r.number("--devices", f.el.devices, 1, most);
    if (auto a = r.value("--alpha")) f.el.alpha = tpipe_examples::to_fraction("--alpha", *a);
    f.el.freeze_every = r.number<std::int64_t>("--freeze-every", f.el.freeze_every, 1);
    f.epochs = r.number("--epochs", f.epochs, 1, most);
    f.el.max_frozen = r.number("--max-frozen", f.el.max_frozen, 0, most);
    f.el.cache_bytes = static_cast<std::size_t>(r.number<std::int64_t>("--cache-mb", 256, 0, std::int64_t{1} << 30)) << 20;
    f.el.autopipe = !r.flag("--no-autopipe");
    f.el.autodp = !r.flag("--no-autodp");
    f.el.autocache = !r.flag("--no-autocache");
    f.o.record_plan = r.text("--record-plan", "");
    f.o.plan_from = r.text("--plan-from", "");
    r.finish();
    r.applies_only({"--devices", "--alpha", "--freeze-every", "--epochs", "--max-frozen", "--cache-mb", "--no-autopipe",
                    "--no-autodp", "--no-autocache", "--record-plan", "--plan-from"},
                   f.elastic, "applies with --elastic");
    r.applies_only({"--record-plan"}, !f.o.record_plan.empty(), "needs a file name, got an empty one");
    r.applies_only({"--plan-from"}, !f.o.plan_from.empty(), "needs a file name, got an empty one");
    // The elastic driver plans its own pipelines: nothing given may be ignored silently.
    if (f.elastic && r.given("--slicer")) {
        if (f.o.slicer != "terapipe")
            throw usage_error("--elastic plans its microbatches itself; --slicer takes only terapipe with it (TeraPipe "
                              "token slices re-planned for every pipeline depth), got " + tpipe::quote(f.o.slicer));
        f.o.terapipe_granularity = granularity > 0 ? granularity : std::max<std::int64_t>(1, f.o.seq_len / 16);
    }
    r.applies_only({"--granularity"}, f.o.terapipe_granularity > 0, "applies with --elastic --slicer terapipe");
    r.applies_only({"--trace"}, !f.o.trace.empty(), "needs a file name, got an empty one");
    r.applies_only({"--stages", "--schedule", "--watchdog", "--check-slicing", "--save", "--save-every",
                    "--keep", "--resume", "--trace"},
                   !f.elastic,
                   "does not apply with --elastic (it plans its pipelines and slices itself: --devices sets how many "
                   "devices; no checkpoints yet)");
    if (f.elastic && f.o.transport == "none")
        throw usage_error("--elastic runs over --transport threads or mpi (a pipeline to shorten), not none");
    if (f.elastic && r.given("--epochs") && f.steps_given)
        throw usage_error("--epochs and --steps both set the length of an --elastic run; give one");
    // The same rules as train_gpt's: nothing given is silently ignored.
    r.applies_only({"--check-tol"}, f.check, "applies with --check");
    r.applies_only({"--link"}, f.o.transport == "mpi", "applies with --transport mpi");
#ifdef TPIPE_APPS_UCX
    tpipe_examples::check_link("train_libtorch_gpt", f.o.link, true);
#else
    tpipe_examples::check_link("train_libtorch_gpt", f.o.link, false);
#endif
    r.applies_only({"--stages", "--schedule", "--slicer", "--watchdog", "--trace"}, f.o.transport != "none",
                   "does not apply with --transport none (plain libtorch, no pipeline)");
    if (f.o.check_slicing && f.o.transport != "threads")
        throw usage_error("--check-slicing runs every stage in this process: use it with --transport threads (under "
                          "--transport mpi each process holds its own stage only)");
    if (r.given("--save") != r.given("--save-every")) throw usage_error("--save DIR and --save-every N go together");
    r.applies_only({"--keep"}, r.given("--save"), "applies with --save");
    r.applies_only({"--save", "--resume"}, f.o.transport != "none", "applies to a pipelined run (--transport threads or mpi)");
    r.applies_only({"--save", "--resume"}, !f.check, "does not go with --check (its plain run starts from step 1)");
    r.applies_only({"--save"}, !f.o.save.empty(), "needs a directory, got an empty name");
    r.applies_only({"--resume"}, !f.o.resume.empty(), "needs a directory, got an empty name");
    if (!f.elastic && f.o.transport != "none" && f.o.stages > f.o.layers)
        throw usage_error("--stages " + std::to_string(f.o.stages) + " for " + std::to_string(f.o.layers) +
                          " layers: every stage needs at least one layer (raise --layers)");
    if (r.given("--threads")) tpipe_examples::check_threads(f.o.threads, 1);
    if (f.o.tp > 1) {  // what composes with tensor parallelism here, and what does not yet
        if (f.o.transport == "none")
            throw usage_error("--tp " + std::to_string(f.o.tp) + " splits the stages of a pipelined run: use --transport "
                              "threads (a pipeline per tensor rank) or mpi (mpirun -np " +
                              std::to_string(f.o.tp * f.o.stages) + ")");
        r.applies_only({"--elastic"}, false, "does not go with --tp yet (the elastic driver re-packs whole stages, not tensor groups)");
        r.applies_only({"--save", "--resume"}, false,
                       "does not go with --tp yet (the libtorch checkpoint holds whole stages, not tensor shares)");
    }
    return f;
}

//! Everything that decides what the processes of an MPI job compute (see train_gpt).
[[maybe_unused]] tpipe::fingerprint launch_fingerprint(const flags& f)
{
    const std::string text = tpipe::read_file(f.o.data, "data file", std::uintmax_t{4} << 30);
    tpipe::fingerprint fp;
    fp.add("binary", tpipe_examples::executable_digest()).add("--layers", f.o.layers).add("--d-model", f.o.d_model);
    fp.add("--heads", f.o.heads).add("--seq-len", f.o.seq_len).add("--batch", f.o.batch).add("--steps", f.o.steps);
    fp.add("--lr", f.o.lr).add("--seed", f.o.seed).add("--stages", f.o.stages).add("--tp", f.o.tp).add("--schedule", f.o.schedule);
    fp.add("--slicer", f.o.slicer).add("--check", f.check).add("--check-tol", f.check_tol);
    fp.add("--save", f.o.save).add("--save-every", f.o.save_every).add("--keep", f.o.keep).add("--resume", f.o.resume);
    fp.add("--granularity", f.o.terapipe_granularity).add("--elastic", f.elastic).add("--devices", f.el.devices).add("--alpha", f.el.alpha);
    fp.add("--freeze-every", f.el.freeze_every).add("--epochs", f.epochs).add("--max-frozen", f.el.max_frozen);
    fp.add("--cache-mb", static_cast<std::int64_t>(f.el.cache_bytes >> 20)).add("--no-autopipe", !f.el.autopipe);
    fp.add("--no-autodp", !f.el.autodp).add("--no-autocache", !f.el.autocache);
    fp.add("--record-plan", f.o.record_plan).add("--plan-from", f.o.plan_from);
    fp.add("--data (content)", tpipe_examples::content_digest(text) + " (" + std::to_string(text.size()) + " bytes)");
    return fp;
}

std::string cuts_text(const std::vector<int>& cuts)
{
    std::string s = "[";
    for (std::size_t i = 0; i < cuts.size(); ++i) s += (i ? ", " : "") + std::to_string(cuts[i]);
    return s + "]";
}

//! --elastic: one line per interval, then the run's rate and, with --check, the plain libtorch
//! run with the same freezing and replica split.
int run_elastic(const flags& f)
{
    tpipe::elastic::driver_options d = f.el;
    const std::int64_t samples = libtorch_gpt::elastic_samples(f.o), per_epoch = samples / f.o.batch;
    d.steps = f.steps_given ? f.o.steps : f.epochs * per_epoch;
    const int modules = static_cast<int>(f.o.layers) + 2;
    auto print = [&](const tpipe::elastic::interval_report& r) {
        if (f.json) return;
        if (r.plan.epoch == 0)
            std::printf("elastic: %lld layers (%d modules: embeddings, blocks, head), d_model %lld, %lld samples (%lld "
                        "steps of %d per epoch), %lld steps, %d device(s) over %s, alpha %g\n",
                        static_cast<long long>(f.o.layers), modules, static_cast<long long>(f.o.d_model),
                        static_cast<long long>(samples), static_cast<long long>(per_epoch), f.o.batch,
                        static_cast<long long>(d.steps), d.devices, f.o.transport.c_str(), d.alpha);
        std::printf("interval %d (steps %lld-%lld): frozen %d/%d modules, %d stage(s) x %d replica(s), %d "
                    "microbatch(es), module cuts %s; %.0f samples/s (predicted %.0f), loss %.4f, re-plan %.0f ms",
                    r.plan.epoch, static_cast<long long>(r.first_step + 1), static_cast<long long>(r.first_step + r.steps),
                    r.plan.frozen, modules, r.plan.stages, r.plan.replicas, r.plan.microbatches,
                    cuts_text(r.stage_cuts).c_str(), r.plan.measured_throughput.value_or(0), r.plan.predicted_throughput,
                    r.mean_loss, r.replan_seconds * 1e3);
        if (!r.plan.slices.empty()) {
            std::string text;
            for (const auto& m : r.plan.slices) {
                std::vector<int> lengths(m.tokens.begin(), m.tokens.end());
                text += (text.empty() ? "" : " | ") + std::to_string(m.rows) + " row(s) x " + cuts_text(lengths);
            }
            std::printf("; token slices %s", text.c_str());
        }
        if (r.plan.frozen > 0)
            std::printf("; frozen rows: %lld computed, %lld extended, %lld cached", static_cast<long long>(r.rows_computed),
                        static_cast<long long>(r.rows_extended), static_cast<long long>(r.rows_cached));
        std::printf("\n");
        std::fflush(stdout);
    };
    const libtorch_gpt::elastic_result r = libtorch_gpt::train_elastic(f.o, d, print);
    double trained = 0;
    int sliced = 0;  // intervals that ran TeraPipe token slices
    for (const auto& i : r.intervals) {
        trained += static_cast<double>(i.steps * f.o.batch);
        sliced += i.plan.slices.empty() ? 0 : 1;
    }
    const double per_s = r.seconds > 0 ? trained / r.seconds : 0;
    bool ok = r.replicas_identical && r.replans_kept_weights;
    double loss_rel = 0, weights_rel = 0;
    const double tol = f.check_tol_given ? f.check_tol : libtorch_gpt::elastic_check_tolerance(r.intervals);
    if (f.check) {
        std::vector<double> losses, ref_losses;
        for (const auto& i : r.intervals) losses.push_back(i.mean_loss);
        const auto ref = libtorch_gpt::frozen_reference(f.o, r.intervals, ref_losses);
        loss_rel = libtorch_gpt::relative_difference(losses, ref_losses);
        weights_rel = libtorch_gpt::relative_difference(r.weights, ref);
        ok = ok && loss_rel <= tol && weights_rel <= tol;
    }
    if (!r.speaks) return ok ? 0 : 3;
    if (f.json) {
        std::printf("{\"elastic\":true,\"transport\":\"%s\",\"link\":\"%s\",\"devices\":%d,\"steps\":%lld,\"intervals\":%zu,"
                    "\"final_frozen\":%d,\"final_stages\":%d,\"final_replicas\":%d,\"sliced_intervals\":%d,\"last_loss\":%.6f,"
                    "\"samples_per_s\":%.2f,\"seconds\":%.3f,\"replicas_identical\":%s,\"replans_kept_weights\":%s,"
                    "\"weights_fnv\":\"%s\"",
                    f.o.transport.c_str(), f.o.link.c_str(), d.devices, static_cast<long long>(d.steps), r.intervals.size(),
                    r.intervals.back().plan.frozen, r.intervals.back().plan.stages, r.intervals.back().plan.replicas,
                    sliced, r.intervals.back().mean_loss, per_s, r.seconds, r.replicas_identical ? "true" : "false",
                    r.replans_kept_weights ? "true" : "false", r.weights_fnv.c_str());
        if (f.check) std::printf(",\"check_loss_rel\":%.3g,\"check_weights_rel\":%.3g,\"check_tol\":%.3g,\"check_ok\":%s",
                                 loss_rel, weights_rel, tol, ok ? "true" : "false");
        std::printf("}\n");
        return ok ? 0 : 3;
    }
    std::printf("elastic run: %.1f samples/s over %.2f s; weights %s%s%s\n", per_s, r.seconds, r.weights_fnv.c_str(),
                r.replicas_identical ? ", replicas identical" : ", replicas DIFFER",
                r.replans_kept_weights ? ", re-plans kept the weights" : ", a re-plan CHANGED the weights");
    if (f.check)
        std::printf("check against plain libtorch with the same freezing and replica split: interval losses %.3g, final "
                    "weights %.3g relative difference (tolerance %.3g%s): %s\n",
                    loss_rel, weights_rel, tol, f.check_tol_given ? "" : ", from the plans' arithmetic",
                    ok ? "MATCH" : "MISMATCH");
    return ok ? 0 : 3;
}

int run(const flags& f)
{
    if (f.elastic) return run_elastic(f);
    libtorch_gpt::options o = f.o;
    o.keep_weights = f.check;  // without --check only their checksum: no process gathers the whole model
    const libtorch_gpt::result r = libtorch_gpt::train(o);
    double loss_rel = 0, weights_rel = 0;
    bool ok = true;
    if (f.check) {
        libtorch_gpt::options plain = f.o;
        plain.transport = "none";
        const libtorch_gpt::result ref = libtorch_gpt::train(plain);
        loss_rel = libtorch_gpt::relative_difference(r.losses, ref.losses);
        weights_rel = libtorch_gpt::relative_difference(r.weights, ref.weights);
        ok = loss_rel <= f.check_tol && weights_rel <= f.check_tol;
    }
    if (!r.speaks) return ok ? 0 : 3;
    if (f.json) {
        std::printf("{\"transport\":\"%s\",\"link\":\"%s\",\"stages\":%d,\"schedule\":\"%s\",\"slicer\":\"%s\",\"steps\":%d,"
                    "\"first_step\":%d,\"first_loss\":%.6f,\"last_loss\":%.6f,\"tokens_per_s\":%.1f,"
                    "\"weights_fnv\":\"%s\"",
                    f.o.transport.c_str(), f.o.link.c_str(), f.o.stages, f.o.schedule.c_str(), f.o.slicer.c_str(), f.o.steps,
                    r.first_step, r.losses.front(), r.losses.back(), r.tokens_per_s, r.weights_fnv.c_str());
        if (f.check) std::printf(",\"check_loss_rel\":%.3g,\"check_weights_rel\":%.3g,\"check_ok\":%s", loss_rel,
                                 weights_rel, ok ? "true" : "false");
        std::printf("}\n");
    } else {
        for (std::size_t s = 0; s < r.losses.size(); ++s)
            std::printf("step %zu  loss %.4f\n", s + static_cast<std::size_t>(r.first_step), r.losses[s]);
        std::printf("%s, %d stage(s), %s, %s: %.0f tokens/s\n", f.o.transport.c_str(), f.o.stages,
                    f.o.schedule.c_str(), f.o.slicer.c_str(), r.tokens_per_s);
        if (f.check)
            std::printf("check against plain libtorch: losses %.3g, final weights %.3g relative difference "
                        "(tolerance %.3g): %s\n",
                        loss_rel, weights_rel, f.check_tol, ok ? "MATCH" : "MISMATCH");
    }
    return ok ? 0 : 3;
}

} // namespace

int main(int argc, char** argv)
{
    // A checkpoint write past the file size limit (ulimit -f) fails with EFBIG, and the save says
    // so, instead of SIGXFSZ killing the process.
    std::signal(SIGXFSZ, SIG_IGN);
    // After the reason is printed: a failure of one MPI process ends every process of the job.
    auto end_job = [](int status) {
#ifdef TPIPE_LIBTORCH_GPT_MPI
        tpipe::mpi::end_job_on_error(status);
#endif
        return status;
    };
    try {
        const flags f = parse(argc, argv);
        tpipe_examples::refuse_independent_copies("train_libtorch_gpt", f.o.transport);
#ifdef TPIPE_LIBTORCH_GPT_MPI
        if (f.o.transport == "mpi") {
            // --watchdog bounds the set-up too (the launch agreement, the job's communicators, the
            // runner's agree): a process stopped before the first step is named, and the job ends.
            tpipe::mpi::environment_options eo;
            eo.progress = f.mpi_progress;
            eo.watchdog = std::chrono::seconds(f.o.watchdog);
            tpipe::mpi::environment env(argc, argv, eo);
            // Before the first step: every process must have been launched alike.
            tpipe::mpi::agree(MPI_COMM_WORLD, launch_fingerprint(f).text(), "");
            return run(f);
        }
#endif
        return run(f);
    } catch (const usage_error& e) {
        std::cerr << "train_libtorch_gpt: " << tpipe::printable(e.what()) << "\n(run train_libtorch_gpt --help for the flags)\n";
        return end_job(2);
    } catch (const std::exception& e) {
        std::cerr << "train_libtorch_gpt: " << tpipe::printable(e.what()) << "\n";
        return end_job(1);
    }
}
