#include "train_flags.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "cli/flag_reader.hpp"
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/spec.hpp>

#include "../common/flags.hpp"

namespace train_gpt {

using tpipe_examples::usage_error;

namespace {

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
    "  --schedule NAME   a runnable schedule of tpipe-plan's registry (gpipe, 1f1b, interleaved, zb-h1, zb-v,\n"
    "                    terapipe-gpipe, terapipe-1f1b, looped-bfs, interleaved-zb, ...; PyTorch's class names such\n"
    "                    as Schedule1F1B are aliases; default 1f1b)\n"
    "  --virtual V       stages per rank for 'interleaved' (default 2)\n"
    "  --slicer SPEC     microbatch:M | tokens:l1,l2,... | grid:M:l1,l2,... | terapipe (default microbatch:4, or one\n"
    "                    microbatch per sequence when --batch is below 4)\n"
    "  --granularity G   token granularity of the terapipe planner (default seq-len/16)\n"
    "  --threads N       compute threads in all (default: hardware threads), split over the ranks and replicas\n"
    "  --dp D            data-parallel replicas, each with its own batch of --batch sequences; gradients are\n"
    "                    averaged across replicas after every step (default 1)\n"
    "  --shard-optimizer with --dp D: each replica keeps AdamW's moments for 1/D of its stages' parameters\n"
    "                    (ZeRO-1, Megatron's distributed optimizer): gradients reduce-scattered, each replica\n"
    "                    steps its shard, parameters all-gathered; bitwise the same training as without it\n"
    "  --tp T            tensor-parallel ranks per stage (Megatron's split: each holds 1/T of the heads and of\n"
    "                    the MLP, and the stage sums its partial products over them): on threads, T*P*D loops,\n"
    "                    or over MPI processes: mpirun -np T*P*D train_gpt --transport mpi --tp T ... (default 1)\n"
    "  --scatter-gather  with --tp: Megatron's scatter/gather between stages: tensor rank k sends 1/T of each\n"
    "                    boundary activation and gradient (they are the same on every tensor rank), and the\n"
    "                    receiving stage all-gathers them over its tensor group; bitwise the same training\n"
    "  --sequence-parallel  with --tp: Megatron's sequence parallelism: each tensor rank keeps and normalises\n"
    "                    1/T of every unit's positions between its sums, which become reduce-scatters and\n"
    "                    all-gathers, and sends only those across stage boundaries\n"
    "  --transport T     threads: every rank and replica in this process (default); mpi: one rank of one\n"
    "                    replica per MPI process, launched as mpirun -np P*D train_gpt --transport mpi ...\n"
    "  --link L          with --transport mpi: the engine activations and gradients cross processes over:\n"
    "                    mpi (default) or ucx (UCX's tagged messages; MPI keeps the control plane)\n"
    "  --device D        cpu (default) or cuda: the CUDA GPT, every rank a compute stream on GPU 0 (--dp,\n"
    "                    --transport, --threads, --trace, --elastic and --slicer terapipe do not apply)\n"
    "  --precision P     with --device cuda: fp32 (default) or bf16 (bf16 storage, float master weights and\n"
    "                    sums; --check then compares within 3e-2, and --check-tol defaults to 3e-2)\n"
    "  --recompute       activation recomputation: each unit keeps only its input to a stage and recomputes the\n"
    "                    stage's forward in its backward (bitwise the same training; less memory, more time)\n"
    "  --untied          separate LM head (default: tied to the token embedding, which\n"
    "                    --elastic freezes with layer 0: the head then reads it frozen)\n"
    "  --elastic         elastic pipelining (PipeTransformer): start as one --devices-stage pipeline; as layers\n"
    "                    freeze, shorten the pipelines and add data-parallel replicas; one line per interval\n"
    "                    (--stages, --dp and --schedule do not apply; the schedule is 1f1b; with --slicer\n"
    "                    terapipe: TeraPipe token slices re-planned for every pipeline depth)\n"
    "  --devices N       --elastic: devices (loop threads, or MPI processes) (default 2)\n"
    "  --alpha A         --elastic: freeze degree of the progressive policy F(e) = ceil(L(1-(1-A)^e)) (default 1/3)\n"
    "  --freeze-every S  --elastic: steps per freeze interval (default: one epoch of the data)\n"
    "  --epochs E        --elastic: epochs to train when --steps is not given (default 3)\n"
    "  --max-frozen F    --elastic: most layers that may freeze (default: all; 0: no freezing, the baseline)\n"
    "  --cache-mb M      --elastic: AutoCache's host-memory budget, beyond it entries spill to disk (default 256)\n"
    "  --no-autopipe, --no-autodp, --no-autocache   --elastic ablations\n"
    "  --record-plan F   --elastic: write the planner's inputs (each layer's measured seconds; with --slicer\n"
    "                    terapipe, the token latency tables) to F, so that --plan-from F reproduces the run\n"
    "  --plan-from F     --elastic: plan from the inputs --record-plan wrote to F instead of measuring them: the\n"
    "                    same plans, so the same weights as the recording run (docs/elastic.md)\n"
    "  --data FILE       training text, bytes are tokens (default: the bundled tiny corpus)\n"
    "  --trace FILE      write a Perfetto/Chrome trace of the last step\n"
    "  --watchdog S      stop a step that makes no progress for S seconds (a peer process stopped, a stage stuck),\n"
    "                    naming what every rank waits for (default 60; 0: never); under MPI it also bounds\n"
    "                    the set-up before the first step, the collectives after the pipeline's run and\n"
    "                    --elastic's, and names a silent process\n"
    "  --json            one JSON line per step (step, loss, tokens_per_s, ...) and a summary line\n"
    "  --check           also train the non-pipelined model: step 1's loss and gradients must match within\n"
    "                    1e-5, the loss curve and final weights within --check-tol (exit status 3 if not)\n"
    "  --check-tol X     tolerance for the loss curve and final weights (default 1e-3; float rounding\n"
    "                    differences between slicings grow slowly over training steps)\n"
    "  --save DIR        save checkpoints under DIR (DIR/step-NNNNNNNN/, committed by one atomic rename)\n"
    "  --save-every N    --save: a checkpoint every N steps (written in the background during the next step)\n"
    "  --keep K          --save: keep the newest K checkpoints (default 0: all)\n"
    "  --resume DIR      continue from a checkpoint (DIR: one, or a --save directory: its newest) up to --steps;\n"
    "                    --stages, --dp, --schedule, --slicer and --transport may differ from the saving run;\n"
    "                    with --elastic: its frozen layers, plan and unit times continue (--transport may differ)\n"
    "  --help            this text\n";

//! Refuses a model whose weights, gradients and AdamW moments (16 bytes a parameter, per
//! replica, twice with --check) would not fit this machine's memory, before allocating them.
void check_memory(const options& o)
{
    try {
        o.cfg.validate();
    } catch (const std::invalid_argument& e) {
        throw usage_error(e.what());
    }
    // Counted in doubles: a huge --d-model must be refused, not overflow the count.
    const double d = o.cfg.d_model, F = double(o.cfg.mlp_ratio) * d, V = o.cfg.vocab;
    const double params = o.cfg.layers * (4 * d * d + 2 * d * F + 9 * d + F) + (o.cfg.tied ? 1 : 2) * V * d +
                          double(o.cfg.seq_len) * d + 2 * d;
    const double per_parameter = o.shard_optimizer ? 8 + 8.0 / o.dp : 16;  // weights, gradients, AdamW's moments
    const double need = params / (o.transport == "mpi" ? o.tp : 1) * per_parameter * (o.transport == "mpi" ? 1 : o.dp) * (o.check ? 2 : 1);
    const double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
    if (have > 0 && need > have)
    {
        std::ostringstream why;
        why << std::setprecision(3) << "the model has " << params << " parameters: its weights, gradients and "
            << "optimizer state need " << need / (1 << 30) << " GiB, more than this machine's " << have / (1 << 30)
            << " GiB ("
            << (o.dp > 1 && o.transport != "mpi" ? "every one of the --dp " + std::to_string(o.dp) +
                                                       " replicas holds its own copy: lower --dp, or "
                                                 : std::string())
            << (o.check ? "drop --check, which trains a second copy, or " : "")
            << "lower --layers, --d-model or --seq-len)";
        throw usage_error(why.str());
    }
}

} // namespace

options parse(int argc, char** argv)
{
    tpipe::flag_reader r(argc, argv);  // tpipe-plan's rules: each flag known and given once, values checked
    if (r.flag("--help") || r.flag("-h")) {
        std::cout << usage_text;
        std::exit(0);
    }
    options o;
    constexpr int most = std::numeric_limits<int>::max();
    o.cfg.layers = r.number("--layers", 4, 1, most);
    o.cfg.d_model = r.number("--d-model", 128, 1, most);
    o.cfg.heads = r.number("--heads", 4, 1, most);
    o.cfg.seq_len = r.number("--seq-len", 128, 1, most);
    o.batch = r.number("--batch", o.batch, 1, most);
    o.steps = r.number("--steps", o.steps, 1, most);
    o.steps_given = r.given("--steps");
    o.lr = r.positive("--lr", o.lr);
    o.seed = r.number<std::uint64_t>("--seed", o.seed, 0);
    o.stages = r.number("--stages", o.stages, 1, most);
    o.schedule = r.text("--schedule", o.schedule);
    o.virtual_stages = r.number("--virtual", o.virtual_stages, 1, most);
    o.slicer = r.text("--slicer", "microbatch:" + std::to_string(std::min(o.batch, 4)));  // fits the other defaults
    o.granularity = r.number<std::int64_t>("--granularity", o.granularity, 1);
    o.threads = r.number("--threads", o.threads, 1, most);
    o.dp = r.number("--dp", o.dp, 1, most);
    o.tp = r.number("--tp", o.tp, 1, most);
    o.scatter_gather = r.flag("--scatter-gather");
    o.sequence_parallel = r.flag("--sequence-parallel");
    o.transport = r.text("--transport", o.transport);
    o.link = r.text("--link", o.link);
    o.device = r.text("--device", o.device);
    o.precision = r.text("--precision", o.precision);
    o.cfg.tied = !r.flag("--untied");
    o.recompute = r.flag("--recompute");
    o.shard_optimizer = r.flag("--shard-optimizer");
    o.elastic = r.flag("--elastic");
    o.el.opts.devices = r.number("--devices", o.el.opts.devices, 1, most);
    if (auto a = r.value("--alpha")) o.el.opts.alpha = tpipe_examples::to_fraction("--alpha", *a);
    o.el.opts.freeze_every = r.number<std::int64_t>("--freeze-every", o.el.opts.freeze_every, 1);
    o.el.epochs = r.number("--epochs", o.el.epochs, 1, most);
    o.el.opts.max_frozen = r.number("--max-frozen", o.el.opts.max_frozen, 0, most);
    if (r.given("--cache-mb")) o.el.opts.cache_bytes = static_cast<std::size_t>(r.number("--cache-mb", 0, 0, most)) << 20;
    o.el.opts.autopipe = !r.flag("--no-autopipe");
    o.el.opts.autodp = !r.flag("--no-autodp");
    o.el.opts.autocache = !r.flag("--no-autocache");
    o.el.record_plan = r.text("--record-plan", "");
    o.el.plan_from = r.text("--plan-from", "");
    o.data = r.text("--data", o.data);
    o.trace = r.text("--trace", o.trace);
    o.watchdog = r.number("--watchdog", o.watchdog, 0, 86400);
    o.el.opts.watchdog = std::chrono::seconds(o.watchdog);  // --elastic: its pipelines and, under MPI, collectives
    o.json = r.flag("--json");
    o.check = r.flag("--check");
    o.check_tol = r.positive("--check-tol", o.check_tol);
    o.ckpt.save = r.text("--save", o.ckpt.save);
    o.ckpt.every = r.number("--save-every", o.ckpt.every, 1, most);
    o.ckpt.keep = r.number("--keep", o.ckpt.keep, 1, most);
    o.ckpt.resume = r.text("--resume", o.ckpt.resume);
    r.finish();
    check_memory(o);
    if (o.transport != "threads" && o.transport != "mpi")
        throw usage_error("unknown transport '" + o.transport + "'; use threads or mpi");
#ifndef TPIPE_GPT_MPI
    if (o.transport == "mpi")
        throw usage_error("--transport mpi: this train_gpt was built without MPI (configure with -DTPIPE_ENABLE_MPI=ON)");
#endif
    r.applies_only({"--link"}, o.transport == "mpi", "applies with --transport mpi");
#ifdef TPIPE_APPS_UCX
    tpipe_examples::check_link("train_gpt", o.link, true);
#else
    tpipe_examples::check_link("train_gpt", o.link, false);
#endif
    const auto names = tpipe::schedule_names();  // the runnable ones; PyTorch's class names are aliases
    const std::string asked = o.schedule;
    try {
        o.schedule = tpipe::canonical_schedule_name(asked);
    } catch (const tpipe::error&) {
        o.schedule.clear();
    }
    if (std::find(names.begin(), names.end(), o.schedule) == names.end()) {
        std::string known;
        for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
        throw usage_error("unknown schedule '" + asked + "'; known: " + known +
                          " (or PyTorch's class names, e.g. Schedule1F1B)");
    }
    r.applies_only({"--virtual"}, tpipe::schedule_registry::global().at(o.schedule).takes_virtual_stages,
                   "applies to the schedules with V stages per rank (e.g. interleaved); " + o.schedule + " places " +
                       std::to_string(tpipe::stages_per_rank(o.schedule)) + " stage(s) per rank");
    r.applies_only({"--granularity"}, o.slicer == "terapipe",
                   "applies to the TeraPipe planner (--slicer terapipe), not to --slicer " + o.slicer);
    r.applies_only({"--check-tol"}, o.check, "applies with --check");
    r.applies_only({"--shard-optimizer"}, o.dp > 1 && !o.elastic && o.device == "cpu",
                   "shards AdamW's state over the data-parallel replicas of --dp D > 1 (not with --elastic or "
                   "--device cuda)");
    if (o.recompute && (o.device != "cpu" || o.elastic))
        throw usage_error("--recompute applies to the CPU GPT's pipelines, not to --device cuda or --elastic");
    if (r.given("--save") != r.given("--save-every")) throw usage_error("--save DIR and --save-every N go together");
    if (r.given("--save") && o.ckpt.save.empty())
        throw usage_error("--save needs a directory, got an empty name");
    if (r.given("--resume") && o.ckpt.resume.empty())
        throw usage_error("--resume needs a checkpoint or a --save directory, got an empty name");
    // Allowed (a run that saves only when stopped by a signal, as tests/state/stop_resume.sh
    // does), but never silent.
    if (r.given("--save-every") && o.ckpt.every > o.steps && (!o.elastic || o.steps_given))
        std::cerr << "train_gpt: warning: --save-every " << o.ckpt.every << " is more than --steps " << o.steps
                  << ": no checkpoint will be saved unless SIGINT or SIGTERM stops the run (then it saves the step "
                     "it stopped after)\n";
    r.applies_only({"--keep"}, r.given("--save"), "applies with --save");
    r.applies_only({"--save", "--resume"}, o.device == "cpu" && !o.check,
                   "is not supported with --device cuda or --check yet");
    if (r.given("--trace") && o.trace.empty()) throw usage_error("--trace needs a file name, got an empty one");
    if (r.given("--threads")) tpipe_examples::check_threads(o.threads, 1);
    // The elastic driver plans its own pipelines: nothing given may be ignored silently.
    r.applies_only({"--schedule", "--stages", "--dp", "--trace", "--virtual"}, !o.elastic,
                   "does not apply with --elastic (it plans its pipelines itself: --devices sets how many devices "
                   "they use)");
    if (o.elastic && r.given("--epochs") && r.given("--steps"))
        throw usage_error("--epochs and --steps both set the length of an --elastic run; give one");
    r.applies_only({"--devices", "--alpha", "--freeze-every", "--epochs", "--max-frozen", "--cache-mb", "--no-autopipe",
                    "--no-autodp", "--no-autocache", "--record-plan", "--plan-from"},
                   o.elastic, "applies with --elastic");
    r.applies_only({"--record-plan"}, !o.el.record_plan.empty(), "needs a file name, got an empty one");
    r.applies_only({"--plan-from"}, !o.el.plan_from.empty(), "needs a file name, got an empty one");
    r.applies_only({"--plan-from"}, !r.given("--resume"),
                   "does not go with --resume (a resumed run plans from the unit times its checkpoint saved)");
    r.applies_only({"--scatter-gather", "--sequence-parallel"}, o.tp > 1,
                   "applies with --tp > 1 (it splits what the tensor ranks share)");
    r.applies_only({"--scatter-gather"}, !o.sequence_parallel,
                   "does not go with --sequence-parallel (which sends each tensor rank's positions only already)");
    if (o.tp > 1) {  // what a tensor-parallel run composes with today (docs/tensor_parallel.md)
        r.applies_only({"--save", "--resume"}, o.transport == "mpi",
                       "with --tp > 1 needs --transport mpi: a tensor-parallel checkpoint is one file per tensor "
                       "rank's process, and on threads one process holds them all (not built)");
        if (o.cfg.heads % o.tp != 0 || o.cfg.d_ff() % o.tp != 0 || o.cfg.vocab % o.tp != 0)
            throw usage_error("--tp " + std::to_string(o.tp) + " must divide --heads " + std::to_string(o.cfg.heads) +
                              ", the MLP width 4 x --d-model = " + std::to_string(o.cfg.d_ff()) + " and the vocabulary " +
                              std::to_string(o.cfg.vocab) + " (bytes): each tensor rank holds whole heads and an equal "
                              "share of the MLP and of the vocabulary");
        r.applies_only({"--elastic"}, false, "is not supported with --tp > 1 yet (docs/tensor_parallel.md lists what composes)");
        if (o.device != "cpu") throw usage_error("--device " + o.device + " is not supported with --tp > 1 yet (the CPU GPT only)");
        if (o.slicer == "terapipe")
            throw usage_error("--slicer terapipe profiles one process's whole stage; with --tp " + std::to_string(o.tp) +
                              " give a fixed slicer (token slices: grid:M:l1,l2,...)");
    }
    if (o.device != "cpu" && o.device != "cuda") throw usage_error("unknown device '" + o.device + "'; use cpu or cuda");
    r.applies_only({"--precision"}, o.device == "cuda", "applies with --device cuda");
    if (o.device == "cuda") {
        r.applies_only({"--dp", "--transport", "--threads", "--trace", "--watchdog", "--elastic", "--devices", "--alpha",
                        "--freeze-every", "--epochs", "--max-frozen", "--cache-mb", "--no-autopipe", "--no-autodp",
                        "--no-autocache", "--granularity"},
                       false, "does not apply with --device cuda");
        if (o.slicer == "terapipe")
            throw usage_error("--slicer terapipe profiles the CPU model; with --device cuda give a fixed slicer");
        if (o.precision != "fp32" && o.precision != "bf16")
            throw usage_error("unknown precision '" + o.precision + "'; use fp32 or bf16");
        if (o.precision == "bf16" && !r.given("--check-tol")) o.check_tol = 3e-2;
#ifndef TPIPE_GPT_CUDA
        throw usage_error("--device cuda: this train_gpt was built without CUDA (configure with -DTPIPE_ENABLE_CUDA=ON)");
#endif
    }
    return o;
}

tpipe::scheme fixed_scheme(const options& o)
{
    try {
        return tpipe::scheme_from_spec(o.slicer, tpipe::batch_shape{o.batch, o.cfg.seq_len});
    } catch (const tpipe::error& e) {
        const bool unknown = o.slicer.find(':') == std::string::npos;
        throw usage_error("--slicer " + o.slicer + ": " + e.what() + (unknown ? " (or terapipe, planned here)" : ""));
    }
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

} // namespace train_gpt
