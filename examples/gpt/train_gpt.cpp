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
#include <iomanip>
#include <limits>
#include <set>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <tpipe/comm/thread_communicator.hpp>
#include <tpipe/core/checked.hpp>
#include <tpipe/core/flag_reader.hpp>
#include <tpipe/core/file.hpp>
#include <tpipe/core/quote.hpp>
#include <tpipe/core/json.hpp>
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/exec/on_threads.hpp>
#include <tpipe/plan/memory_model.hpp>
#include <tpipe/exec/fingerprint.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>
#include <tpipe/slice/spec.hpp>

#include "checkpointing.hpp"
#include "elastic_command.hpp"
#include "gpt/compare.hpp"
#include "gpt/fingerprint.hpp"
#include "../common/flags.hpp"
#include "../common/launch.hpp"
#include "gpt/model.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/planning.hpp"
#include "gpt/stage_state.hpp"
#ifdef TPIPE_GPT_CUDA
#include "gpt_cuda/train.hpp"
#endif

#ifdef TPIPE_GPT_MPI
#include <tpipe/mpi/agree.hpp>
#include <tpipe/mpi/communicator.hpp>
#include <tpipe/mpi/environment.hpp>
#include <tpipe/mpi/transport.hpp>
#include <tpipe/exec/sync_wait.hpp>
#endif

#ifndef TPIPE_GPT_DEFAULT_CORPUS
#define TPIPE_GPT_DEFAULT_CORPUS "examples/gpt/data/tiny_corpus.txt"
#endif

namespace {

using gpt::fnv_hex;
using tpipe_examples::usage_error;

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
    int dp = 1;
    std::string transport = "threads";
    std::string device = "cpu";
    std::string precision = "fp32";
    bool elastic = false;
    bool recompute = false;
    bool shard_optimizer = false;  // ZeRO-1: AdamW's state sharded over the --dp replicas
    bool steps_given = false;
    int watchdog = 60;  // seconds without progress before a step is stopped (0: never)
    gpt::elastic_command el;
    gpt::checkpoint_flags ckpt;  // --save, --save-every, --keep, --resume
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
    "  --transport T     threads: every rank and replica in this process (default); mpi: one rank of one\n"
    "                    replica per MPI process, launched as mpirun -np P*D train_gpt --transport mpi ...\n"
    "  --device D        cpu (default) or cuda: the CUDA GPT, every rank a compute stream on GPU 0 (--dp,\n"
    "                    --transport, --threads, --trace, --elastic and --slicer terapipe do not apply)\n"
    "  --precision P     with --device cuda: fp32 (default) or bf16 (bf16 storage, float master weights and\n"
    "                    sums; --check then compares within 3e-2, and --check-tol defaults to 3e-2)\n"
    "  --recompute       activation recomputation: each unit keeps only its input to a stage and recomputes the\n"
    "                    stage's forward in its backward (bitwise the same training; less memory, more time)\n"
    "  --untied          separate LM head (default: tied to the token embedding; --elastic needs it)\n"
    "  --elastic         elastic pipelining (PipeTransformer): start as one --devices-stage pipeline; as layers\n"
    "                    freeze, shorten the pipelines and add data-parallel replicas; one line per interval\n"
    "                    (--stages, --dp and --schedule do not apply; the schedule is 1f1b; with --slicer\n"
    "                    terapipe, threads only: TeraPipe token slices re-planned for every pipeline depth)\n"
    "  --devices N       --elastic: devices (loop threads, or MPI processes) (default 2)\n"
    "  --alpha A         --elastic: freeze degree of the progressive policy F(e) = ceil(L(1-(1-A)^e)) (default 1/3)\n"
    "  --freeze-every S  --elastic: steps per freeze interval (default: one epoch of the data)\n"
    "  --epochs E        --elastic: epochs to train when --steps is not given (default 3)\n"
    "  --max-frozen F    --elastic: most layers that may freeze (default: all; 0: no freezing, the baseline)\n"
    "  --cache-mb M      --elastic: AutoCache's host-memory budget, beyond it entries spill to disk (default 256)\n"
    "  --no-autopipe, --no-autodp, --no-autocache   --elastic ablations\n"
    "  --data FILE       training text, bytes are tokens (default: the bundled tiny corpus)\n"
    "  --trace FILE      write a Perfetto/Chrome trace of the last step\n"
    "  --watchdog S      stop a step that makes no progress for S seconds (a peer process stopped, a stage stuck),\n"
    "                    naming what every rank waits for (default 60; 0: never)\n"
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
    const double need = params * per_parameter * (o.transport == "mpi" ? 1 : o.dp) * (o.check ? 2 : 1);
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
    o.transport = r.text("--transport", o.transport);
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
    o.data = r.text("--data", o.data);
    o.trace = r.text("--trace", o.trace);
    o.watchdog = r.number("--watchdog", o.watchdog, 0, 86400);
    o.json = r.flag("--json");
    o.check = r.flag("--check");
    o.check_tol = r.positive("--check-tol", o.check_tol);
    o.ckpt.save = r.text("--save", o.ckpt.save);
    o.ckpt.every = r.number("--save-every", o.ckpt.every, 1, most);
    o.ckpt.keep = r.number("--keep", o.ckpt.keep, 1, most);
    o.ckpt.resume = r.text("--resume", o.ckpt.resume);
    r.finish();
    check_memory(o);
    if (o.elastic && o.slicer == "terapipe" && o.transport == "mpi")
        throw usage_error("--elastic --slicer terapipe runs on threads; under --transport mpi drop --slicer terapipe "
                          "(every process would need the profiled token latencies)");
    if (o.transport != "threads" && o.transport != "mpi")
        throw usage_error("unknown transport '" + o.transport + "'; use threads or mpi");
#ifndef TPIPE_GPT_MPI
    if (o.transport == "mpi")
        throw usage_error("--transport mpi: this train_gpt was built without MPI (configure with -DTPIPE_ENABLE_MPI=ON)");
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
    r.applies_only({"--keep"}, r.given("--save"), "applies with --save");
    r.applies_only({"--save", "--resume"}, o.device == "cpu" && !o.check,
                   "is not supported with --device cuda or --check yet");
    if (r.given("--trace") && o.trace.empty()) throw usage_error("--trace needs a file name, got an empty one");
    if (r.given("--threads")) tpipe_examples::check_threads(o.threads, 1);
    // The elastic driver plans its own pipelines: nothing given may be ignored silently.
    r.applies_only({"--schedule", "--stages", "--dp", "--trace", "--virtual", "--watchdog"}, !o.elastic,
                   "does not apply with --elastic (it plans its pipelines itself: --devices sets how many devices "
                   "they use)");
    if (o.elastic && r.given("--epochs") && r.given("--steps"))
        throw usage_error("--epochs and --steps both set the length of an --elastic run; give one");
    r.applies_only({"--devices", "--alpha", "--freeze-every", "--epochs", "--max-frozen", "--cache-mb", "--no-autopipe",
                    "--no-autodp", "--no-autocache"},
                   o.elastic, "applies with --elastic");
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

//! A fixed slicer from --slicer (everything but "terapipe").
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

std::string clock_text(double s)
{
    const long long t = static_cast<long long>(std::max(0.0, s) + 0.5);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%02lld:%02lld", t / 60, t % 60);
    return buf;
}


//! The rows of several batches as one batch (the non-pipelined reference of D replicas).
gpt::batch concatenate(const std::vector<gpt::batch>& parts)
{
    gpt::batch all = parts.front();
    for (std::size_t k = 1; k < parts.size(); ++k) {
        all.rows += parts[k].rows;
        all.inputs.insert(all.inputs.end(), parts[k].inputs.begin(), parts[k].inputs.end());
        all.targets.insert(all.targets.end(), parts[k].targets.begin(), parts[k].targets.end());
    }
    return all;
}

//! Which (replica, pipeline rank) pairs this process runs: all of them without MPI, one under it.
struct job {
    int process = 0;
    int replica = -1;  //!< -1: every replica and rank
    int rank = -1;
    bool has_replica(int d) const { return replica < 0 || replica == d; }
    bool runs(int d, int r) const { return has_replica(d) && (rank < 0 || rank == r); }
    int first_replica() const { return replica < 0 ? 0 : replica; }
};

//! One data-parallel replica on this process: the state of its stages here (stage-local:
//! parameters, gradients and AdamW moments of those stages only), its pipeline and runner.
struct replica {
    using pipe_t = tpipe::uniform_pipeline<gpt::stage<float>>;
    using local_runner_t = tpipe::runner<pipe_t, tpipe::cpu_engine>;

    int index;
    const options* o;
    std::unique_ptr<gpt::stage_states<float>> state;
    std::unique_ptr<gpt::pipelined_model<float>> model;
    std::unique_ptr<local_runner_t> local_runner;
    std::vector<tpipe::thread_communicator> members;  // replicas on threads: one per stage
    std::unique_ptr<tpipe::data_parallel<tpipe::thread_communicator>> dp_threads;

    //! Every replica starts from the same weights (same seed); each draws its own batches.
    replica(const options& opts, int d) : index(d), o(&opts) {}

    void build(int stages, int threads_per_part, const std::vector<bool>& here)
    {
        state = std::make_unique<gpt::stage_states<float>>(o->cfg, stages, std::vector<int>{}, here,
                                                           gpt::adamw_options{.lr = o->lr}, o->seed);
        model = std::make_unique<gpt::pipelined_model<float>>(o->cfg, state->pointers(), threads_per_part);
    }
    //! Whether the stages this replica and `other` both hold have the same weights, bitwise.
    bool same_weights(const replica& other) const
    {
        for (int s = 0; s < state->stages(); ++s)
            if (state->holds(s) && other.state->holds(s) && state->params(s).value != other.state->params(s).value)
                return false;
        return true;
    }
    //! FNV-1a of the weights of stage `stage` (-1: every stage here, in the whole model's order;
    //! with every stage here, that of the whole model's flat vector), continued from `h`.
    std::uint64_t fingerprint(std::uint64_t h, int stage = -1) const
    {
        auto add = [&](std::int64_t, std::span<const float> v) { h = gpt::fnv_update(h, v); };
        if (stage < 0) state->each_tensor(false, add);
        else state->each_tensor(stage, false, add);
        return h;
    }

    //! --shard-optimizer: each stage's AdamW keeps and steps only the elements whose reduced
    //! gradients `dp` leaves here (this replica's segment of every bucket of every gradient span).
    template <class DP>
    void shard_optimizer(const DP& dp)
    {
        for (int s = 0; s < state->stages(); ++s) {
            if (!state->holds(s)) continue;
            std::vector<tpipe::element_range> owned;
            for (const auto g : model->part_at(s).gradient_ranges())
                for (const auto r : dp.template shard<float>(s, g.size)) owned.push_back({g.begin + r.begin, r.size});
            state->opt(s).shard(std::move(owned));
        }
    }
    //! --shard-optimizer's step, after the run reduce-scattered the gradients; every replica runs
    //! it together. The tied embedding's and head's gradients are all-gathered whole (the tied
    //! sum needs both; all of them with `whole_gradients`, for --check), the norm is summed over
    //! every shard (exact: the same bits as one replica's whole sum), each stage steps its
    //! shard, and the parameters are all-gathered: bitwise the replicated optimizer's step.
    //! `over_pipeline(tied)` sums over the pipeline's processes (under MPI), `over_all(digits)`
    //! over the replicas and processes.
    template <class DP, class Pipeline, class All>
    tpipe::task<void> sharded_step(DP& dp, Pipeline over_pipeline, All over_all, bool whole_gradients)
    {
        auto& st = *state;
        const int last = st.stages() - 1;
        for (int s = 0; s < st.stages(); ++s) {
            if (!st.holds(s)) continue;
            const auto spans = model->part_at(s).gradient_ranges();
            for (std::size_t k = 0; k < spans.size(); ++k) {
                const bool tied = st.tied_across_stages() && ((s == 0 && k == 0) || (s == last && k + 1 == spans.size()));
                if (tied || whole_gradients)
                    co_await dp.all_gather(s, std::span<float>(st.params(s).grad).subspan(spans[k].begin, spans[k].size));
            }
        }
        std::vector<float> tied = st.tied_share();
        co_await over_pipeline(std::span<float>(tied));
        st.set_tied(tied);
        auto squares = st.squares();
        co_await over_all(squares.digits());
        st.step(squares);
        for (int s = 0; s < st.stages(); ++s)
            if (st.holds(s))
                for (const auto g : model->part_at(s).gradient_ranges())
                    co_await dp.all_gather(s, std::span<float>(st.params(s).value).subspan(g.begin, g.size));
    }

    //! The data stream of replica d (replica 0's is the stream of a run without replicas).
    static std::uint64_t data_seed(const options& o, int d)
    {
        return o.seed * 0x9E3779B97F4A7C15ULL + 7 + static_cast<std::uint64_t>(d) * 0xD1B54A32D192ED03ULL;
    }

};

#ifdef TPIPE_GPT_MPI
//! train_gpt under mpirun: process d * P + r runs pipeline rank r of replica d.
//!
//! Stage-local state: each process holds and steps its stages only. After the run, the
//! replica's pipeline ranks sum (tpipe::mpi::communicator, rank-order fold) the tied gradient's
//! shares (embedding + head) and the exact sums of squares of the norm clip (integers: the sum
//! is exact), so every process clips with the same global norm, bitwise that of the same run
//! on threads.
class mpi_job {
public:
    job where;

    mpi_job(int ranks, int replicas) : P_(ranks), D_(replicas)
    {
        int size = 0;
        tpipe::mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &where.process), "MPI_Comm_rank");
        tpipe::mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
        if (size != P_ * D_)
            throw usage_error("--transport mpi with --stages " + std::to_string(P_) + " and --dp " + std::to_string(D_) +
                              " needs " + std::to_string(P_ * D_) + " processes, but the job has " +
                              std::to_string(size) + "; launch it with mpirun -np " + std::to_string(P_ * D_));
        where.replica = where.process / P_;
        where.rank = where.process % P_;
        transport_ = std::make_unique<tpipe::mpi::transport>(tpipe::world::one_rank_per_process(P_, D_), where.replica);
        replicas_ = std::make_unique<tpipe::mpi::communicator>(tpipe::mpi::communicator::world().split(where.rank, where.replica));
        pipeline_comm_ = std::make_unique<tpipe::mpi::communicator>(tpipe::mpi::communicator::world().split(where.replica, where.rank));
        world_ = std::make_unique<tpipe::mpi::communicator>(tpipe::mpi::communicator::world());
    }

    //! The largest of every process's `mine`: with a stop signal's number (0: none), every process
    //! stops at the same step boundary, whichever of them the signal reached, and saves there.
    int agree_max(int mine)
    {
        int all = 0;
        tpipe::mpi::check(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce (stop signal)");
        return all;
    }

    //! Every process meets here (the checkpoint's commit waits for every shard).
    void barrier()
    {
        tpipe::sync_wait([](tpipe::mpi::communicator& c) -> tpipe::task<void> { co_await c.barrier(); }(*world_));
    }

    //! Process 0's TeraPipe plan (and its objective), on every process.
    tpipe::scheme share(const tpipe::scheme& mine, double& planned_T)
    {
        std::vector<std::int64_t> flat;
        for (const auto& m : mine.parts()) {
            flat.push_back(m.row_begin);
            flat.push_back(m.row_end);
            flat.push_back(static_cast<std::int64_t>(m.cuts.size()));
            flat.insert(flat.end(), m.cuts.begin(), m.cuts.end());
        }
        long long n = static_cast<long long>(flat.size());
        tpipe::mpi::check(MPI_Bcast(&n, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD), "MPI_Bcast");
        flat.resize(static_cast<std::size_t>(n));
        tpipe::mpi::check(MPI_Bcast(flat.data(), static_cast<int>(n), MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
        tpipe::mpi::check(MPI_Bcast(&planned_T, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast");
        std::vector<tpipe::scheme::microbatch> mbs;
        for (std::size_t k = 0; k < flat.size();) {
            tpipe::scheme::microbatch m;
            m.row_begin = flat[k];
            m.row_end = flat[k + 1];
            m.cuts.assign(flat.begin() + static_cast<std::ptrdiff_t>(k + 3),
                          flat.begin() + static_cast<std::ptrdiff_t>(k + 3 + static_cast<std::size_t>(flat[k + 2])));
            k += 3 + static_cast<std::size_t>(flat[k + 2]);
            mbs.push_back(std::move(m));
        }
        return tpipe::scheme(std::move(mbs));
    }

    void connect(replica& r, const tpipe::program& prog, tpipe::cpu_engine& engine, tpipe::run_options opts, bool sharded)
    {
        std::vector<tpipe::mpi::communicator*> comms(static_cast<std::size_t>(prog.stages()), nullptr);
        for (int s = 0; s < prog.stages(); ++s)
            if (prog.stage_rank[s] == where.rank) comms[s] = replicas_.get();
        if (D_ > 1) {
            dp_ = std::make_unique<tpipe::data_parallel<tpipe::mpi::communicator>>(r.model->pipe(), comms,
                                                                                   tpipe::data_parallel_options{.shard = sharded});
            opts.after_backward = dp_->hook();
            if (sharded) r.shard_optimizer(*dp_);
        }
        sharded_ = sharded && D_ > 1;
        runner_ = std::make_unique<runner_t>(r.model->pipe(), prog, engine, *transport_, opts);
    }

    //! One step of this process's rank; returns the mean loss over every replica.
    double step(replica& r, const gpt::batch& b, tpipe::run_stats& stats, bool whole_gradients)
    {
        r.model->begin_step(b);
        stats = runner_->run(r.model->io());
        const double mine = r.model->finish_step();
        if (sharded_) {
            auto pipeline = [this](std::span<float> v) { return over_pipeline(v); };
            auto all = [this](std::span<std::int64_t> v) -> tpipe::task<void> {
                co_await replicas_->all_reduce_sum(v);
                co_await over_pipeline(v);
            };
            tpipe::sync_wait(r.sharded_step(*dp_, pipeline, all, whole_gradients));
        } else {
            sync_and_step(r);
        }
        double sum = 0;
        tpipe::mpi::check(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce (loss)");
        return sum / D_;
    }

private:
    //! The replicated optimizer's step: tied gradients and the norm summed over the pipeline.
    void sync_and_step(replica& r)
    {
        std::vector<float> tied = r.state->tied_share();
        tpipe::sync_wait(over_pipeline(std::span<float>(tied)));
        r.state->set_tied(tied);  // before the squares: the embedding's count e + h
        auto squares = r.state->squares();
        tpipe::sync_wait(over_pipeline(squares.digits()));
        r.state->step(squares);
    }

public:
    //! FNV-1a of the replica's whole weights: stage by stage, the rank running each continues
    //! the hash of the stages before it and hands it on.
    std::string fingerprint(const replica& r, const tpipe::program& prog)
    {
        std::uint64_t h = gpt::fnv_offset_basis;
        for (int s = 0; s < prog.stages(); ++s) {
            const int owner = prog.stage_rank[static_cast<std::size_t>(s)];
            if (owner == where.rank) h = r.fingerprint(h, s);
            tpipe::sync_wait(broadcast_over_pipeline(h, owner));
        }
        return gpt::fnv_hex(h);
    }
    //! The replica's whole weights or gradients on every rank of its pipeline (for --check).
    std::vector<float> whole(const replica& r, bool gradients)
    {
        std::vector<float> w = r.state->whole(gradients);  // zeros where other ranks hold the stages
        tpipe::sync_wait(over_pipeline(std::span<float>(w)));
        return w;
    }

    //! Whether every process has this weights fingerprint.
    bool same_everywhere(const std::string& mine)
    {
        std::string first = mine;  // process 0's, after the broadcast
        tpipe::mpi::check(MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_CHAR, 0, MPI_COMM_WORLD),
                          "MPI_Bcast (weights fingerprint)");
        int ok = mine == first ? 1 : 0, all = 0;
        MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        return all == 1;
    }

private:
    //! Sums `values` over the replica's pipeline ranks (rank-order fold; exact for integers).
    template <class V>
    tpipe::task<void> over_pipeline(std::span<V> values)
    {
        if (!values.empty()) co_await pipeline_comm_->all_reduce_sum(values);
    }
    tpipe::task<void> broadcast_over_pipeline(std::uint64_t& h, int root)
    {
        co_await pipeline_comm_->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&h, 1)), root);
    }
    using runner_t = tpipe::runner<replica::pipe_t, tpipe::cpu_engine, tpipe::mpi::transport>;
    int P_, D_;
    std::unique_ptr<tpipe::mpi::transport> transport_;
    std::unique_ptr<tpipe::mpi::communicator> replicas_, pipeline_comm_, world_;
    std::unique_ptr<tpipe::data_parallel<tpipe::mpi::communicator>> dp_;
    std::unique_ptr<runner_t> runner_;
    bool sharded_ = false;
};
#endif

//! The memory model's (tpipe/plan/memory_model.hpp) peak for this process: per stage here, fp32
//! weights and gradients, AdamW's two moments and its one-byte decay flag (17 B a parameter; the
//! last 9 divided by D with --shard-optimizer) and
//! every unit's activations alive at once, plus a fixed floor: the peak RSS of train_gpt with a
//! negligible model (binary, libraries, allocator, thread stacks, BLAS buffers; MPI's too under
//! --transport mpi), measured in docs/memory.md.
double predicted_peak_bytes(const options& o, const std::vector<std::unique_ptr<replica>>& reps,
                            const tpipe::scheme& units)
{
    const double floor_bytes = (o.transport == "mpi" ? 17.0 : 10.0) * (1 << 20);
    const tpipe::transformer_shape shape{.layers = o.cfg.layers, .hidden = o.cfg.d_model, .heads = o.cfg.heads,
                                         .vocab = o.cfg.vocab};
    double bytes = floor_bytes;
    for (const auto& r : reps)
        for (int s = 0; s < r->state->stages(); ++s) {
            if (!r->state->holds(s)) continue;
            const auto& held = r->state->params(s).lay.held;
            // The CPU GPT's saves per layer, token and hidden unit: 16 floats from the forward
            // (x, ln1, qkv, attn, xmid, ln2, fc, act) and 11 from the backward kept to the weight
            // gradient; fp32 attention probabilities; K, V and their gradients per microbatch.
            const double optimizer = o.shard_optimizer ? 9.0 / o.dp : 9.0;  // sharded: 1/D of m, v and the decay flag
            tpipe::memory_options mo{.weight_bytes = 4, .gradient_bytes = 4, .master_bytes = 0, .optimizer_bytes = optimizer,
                                     .activation_bytes = 27 * 4, .split_activation_bytes = 0, .score_bytes = 4,
                                     .cache_bytes = 8, .embedding = held.first, .recompute = o.recompute,
                                     .input_bytes = 4};
            const tpipe::memory_model m(shape, std::max(1, held.layer_end - held.layer_begin), 1, o.cfg.seq_len, mo);
            bytes += m.static_bytes() + m.all_alive_bytes(units);
        }
    return bytes;
}

//! --device cuda: the CUDA GPT (examples/gpt/cuda) under the same schedule, slicing and data.
int train_on_cuda(const options& o, const std::string& text)
{
#ifdef TPIPE_GPT_CUDA
    const int stages = o.stages * tpipe::stages_per_rank(o.schedule, o.virtual_stages);
    if (stages > o.cfg.layers)
        throw usage_error(std::to_string(stages) + " pipeline stages for " + std::to_string(o.cfg.layers) +
                          " layers: every stage needs at least one (raise --layers)");
    const tpipe::scheme units = fixed_scheme(o);
    tpipe::program prog;
    try {
        prog = tpipe::make_schedule(o.schedule, o.virtual_stages).program(tpipe::topology{.ranks = o.stages}, units);
    } catch (const tpipe::error& e) {
        throw usage_error("schedule '" + o.schedule + "' cannot run " + describe(units) + ": " + e.what());
    }
    return gpt::cuda::train({.cfg = o.cfg, .batch = o.batch, .steps = o.steps, .lr = o.lr, .seed = o.seed,
                             .data_seed = replica::data_seed(o, 0), .ranks = o.stages, .stages = stages,
                             .schedule = o.schedule, .units = describe(units), .bf16 = o.precision == "bf16",
                             .json = o.json, .check = o.check, .check_tol = o.check_tol},
                            prog, text);
#else
    (void)o, (void)text;
    return 2;  // parse() refused --device cuda already
#endif
}

//! Everything that decides what the processes of an MPI job compute, in a fixed order: the job
//! ends on every process, naming the first field that differs, if they were launched differently.
[[maybe_unused]] tpipe::fingerprint launch_fingerprint(const options& o, const std::string& text)
{
    tpipe::fingerprint f;
    f.add("binary", tpipe_examples::executable_digest()).add("--layers", o.cfg.layers).add("--d-model", o.cfg.d_model);
    f.add("--heads", o.cfg.heads).add("--seq-len", o.cfg.seq_len).add("--untied", !o.cfg.tied).add("--batch", o.batch);
    f.add("--steps", o.steps).add("--steps given", o.steps_given).add("--lr", o.lr).add("--seed", o.seed);
    f.add("--watchdog", o.watchdog).add("--stages", o.stages).add("--schedule", o.schedule).add("--virtual", o.virtual_stages);
    f.add("--slicer", o.slicer).add("--granularity", o.granularity).add("--dp", o.dp).add("--device", o.device);
    f.add("--precision", o.precision).add("--check", o.check).add("--check-tol", o.check_tol);
    f.add("--elastic", o.elastic).add("--devices", o.el.opts.devices).add("--alpha", o.el.opts.alpha);
    f.add("--freeze-every", o.el.opts.freeze_every).add("--epochs", o.el.epochs).add("--max-frozen", o.el.opts.max_frozen);
    f.add("--cache-mb", o.el.opts.cache_bytes).add("--no-autopipe", !o.el.opts.autopipe);
    f.add("--no-autodp", !o.el.opts.autodp).add("--no-autocache", !o.el.opts.autocache);
    f.add("--recompute", o.recompute).add("--shard-optimizer", o.shard_optimizer).add("--save", o.ckpt.save).add("--save-every", o.ckpt.every);
    f.add("--keep", o.ckpt.keep).add("--resume", o.ckpt.resume);
    f.add("--data (content)", tpipe_examples::content_digest(text) + " (" + std::to_string(text.size()) + " bytes)");
    return f;
}

int train(const options& o)
{
    // A regular file, read whole up to a bound (a FIFO or /dev/zero is refused, not waited on).
    const std::string text = tpipe::read_file(o.data, "data file", std::uintmax_t{4} << 30);
#ifdef TPIPE_GPT_MPI
    // Before anything sized by the flags: every process must have been launched alike.
    if (o.transport == "mpi") tpipe::mpi::agree(MPI_COMM_WORLD, launch_fingerprint(o, text).text(), "");
#endif
    if (static_cast<std::int64_t>(text.size()) < o.cfg.seq_len + 1) {
        std::cerr << "train_gpt: the data file '" << o.data << "' has " << text.size()
                  << " bytes; --seq-len " << o.cfg.seq_len << " needs at least " << o.cfg.seq_len + 1 << "\n";
        return 1;
    }
    if (o.elastic) {
        gpt::elastic_command c = o.el;
        c.cfg = o.cfg;
        c.json = o.json;
        c.check = o.check;
        c.transport = o.transport;
        c.ckpt = o.ckpt;
        c.opts.batch = o.batch;
        c.opts.steps = o.steps_given ? o.steps : 0;
        c.opts.threads = o.threads;
        c.opts.seed = o.seed;
        c.opts.opt.lr = o.lr;
        if (o.slicer == "terapipe")  // token slices inside the elastic pipeline, re-planned at every re-plan
            c.opts.terapipe_granularity = o.granularity > 0 ? o.granularity : std::max<std::int64_t>(1, o.cfg.seq_len / 16);
        if (o.cfg.tied) throw usage_error("--elastic freezes the embedding with the first layer, which would freeze a tied LM head too: add --untied");
        if (o.el.opts.max_frozen > o.cfg.layers)
            throw usage_error("--max-frozen " + std::to_string(o.el.opts.max_frozen) + " exceeds the " + std::to_string(o.cfg.layers) + " layers");
        if (!(o.el.opts.alpha <= 1))
            throw usage_error("--alpha must lie in (0, 1], got " + std::to_string(o.el.opts.alpha));
        if (o.batch % o.el.opts.devices != 0)
            throw usage_error("--elastic: --batch " + std::to_string(o.batch) + " (the global batch) must be a multiple of --devices " +
                              std::to_string(o.el.opts.devices) + ", so that every replica count shares it equally");
        if (o.el.opts.devices > o.cfg.layers + 1)
            throw usage_error("--elastic: " + std::to_string(o.el.opts.devices) + " devices need at least " +
                              std::to_string(o.el.opts.devices - 1) + " layers (one stage per layer, the last with the head)");
        return gpt::run_elastic_command(c, text);
    }
    if (o.device == "cuda") return train_on_cuda(o, text);
    const int ranks = o.stages;
    const int D = o.dp;
    const int stages = ranks * tpipe::stages_per_rank(o.schedule, o.virtual_stages);
    if (stages > o.cfg.layers)
        throw usage_error("--stages " + std::to_string(ranks) + " with schedule " + o.schedule + " makes " +
                          std::to_string(stages) + " pipeline stages, but the model has " +
                          std::to_string(o.cfg.layers) + " layers: every stage needs at least one (raise --layers)");
    const bool over_mpi = o.transport == "mpi";
    job where;  // this process's place in the job (every rank and replica here without MPI)
#ifdef TPIPE_GPT_MPI
    std::unique_ptr<mpi_job> mpi;
    if (over_mpi) {
        mpi = std::make_unique<mpi_job>(ranks, D);
        where = mpi->where;
    }
#endif
    const bool speaks = where.process == 0;  // one process prints
    const int hw = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    const int threads_per_part = std::max(1, hw / (ranks * D));
    const bool tty = !o.json && speaks && isatty(STDOUT_FILENO);

    // The replicas this process holds: each its weights, data stream and optimizer; their
    // pipelines are built once the program is known.
    std::vector<std::unique_ptr<replica>> reps;
    for (int d = 0; d < D; ++d)
        if (where.has_replica(d)) reps.push_back(std::make_unique<replica>(o, d));

    // The units of every step: a fixed slicer, or the TeraPipe plan for this model's stages.
    tpipe::scheme units;
    double planned_T = 0;
    if (o.slicer == "terapipe") {
        const std::int64_t g = o.granularity > 0 ? o.granularity : std::max<std::int64_t>(1, o.cfg.seq_len / 16);
        if (o.cfg.seq_len % g != 0)
            throw usage_error("--granularity " + std::to_string(g) + " must divide --seq-len " +
                              std::to_string(o.cfg.seq_len));
        tpipe::json::object m;
        std::ostringstream said;
        if (speaks) {  // profiled by one process (timings differ between processes); the others get the plan
            gpt::parameters<float> whole_params(o.cfg);  // the whole model, for the profile only
            whole_params.init(o.seed);
            gpt::pipelined_model<float> whole(whole_params, stages, threads_per_part);
            std::uint64_t probe_rng = replica::data_seed(o, 0);  // replica 0's first batch
            const auto probe = gpt::sample_batch(text, o.batch, o.cfg.seq_len, probe_rng);
            const auto grid = gpt::gpt_profile_grid(o.batch, o.cfg.seq_len, g);
            if (!o.json) std::cout << "profiling " << stages << " stage(s) over " << grid.tokens.size() << " lengths x "
                                   << grid.contexts.size() + 1 << " contexts x " << grid.rows.size() << " row counts...\n";
            const auto latency = gpt::profile_parts(whole, probe, grid);
            const auto plan = tpipe::plan_slices(
                latency, tpipe::slicing_problem{.stages = stages, .seq_len = o.cfg.seq_len, .batch = o.batch,
                                                .granularity = g});
            units = plan.scheme();
            planned_T = plan.objective;
            const auto& dl = latency.parts.back().delta();
            if (o.json) {
                m = tpipe::json::object{{"plan", describe(units)}, {"planned_T_s", plan.objective}, {"t_max_s", plan.t_max},
                                        {"units", static_cast<std::int64_t>(plan.units())}};
                tpipe::json::array t0;
                for (auto s : grid.tokens) t0.push_back(latency.seconds(1, s, 0));
                m["t_b1_c0_s"] = t0;
                tpipe::json::array lens;
                for (auto s : grid.tokens) lens.push_back(s);
                m["t_b1_c0_tokens"] = lens;
                m["delta_last_stage"] = tpipe::json::array{dl[0], dl[1], dl[2], dl[3]};
                std::cout << tpipe::json::dump(tpipe::json::value(std::move(m))) << "\n";
            } else {
                std::cout << "latency model (slowest stage, b=1, c=0):";
                for (auto s : grid.tokens) std::cout << " t(" << s << ")=" << latency.seconds(1, s, 0) * 1e3 << "ms";
                std::cout << "\ncontext term of the last stage: " << dl[0] << " + " << dl[1] << "*bs + " << dl[2]
                          << "*bc + " << dl[3] << "*bsc s\n";
                std::cout << "TeraPipe plan: " << describe(units) << "; planned T = " << plan.objective * 1e3
                          << " ms per iteration (" << plan.units() << " units, t_max " << plan.t_max * 1e3 << " ms)\n";
            }
        }
#ifdef TPIPE_GPT_MPI
        if (mpi) units = mpi->share(units, planned_T);
#endif
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
    if (!o.json && speaks)
        std::cout << "model: " << o.cfg.layers << " layers, d_model " << o.cfg.d_model << ", " << o.cfg.heads
                  << " heads, " << gpt::layout(o.cfg).total << " parameters; " << ranks << " rank(s), " << stages
                  << " stage(s), schedule " << o.schedule << ", " << D << " replica(s) over " << o.transport << ", "
                  << threads_per_part << " thread(s) per stage\n"
                  << "units: " << describe(units) << "\n";

    // Pipelines, runners and the data-parallel all-reduce of every replica here.
    tpipe::run_options ro;
    ro.trace = !o.trace.empty();
    ro.watchdog = std::chrono::seconds(o.watchdog);
    ro.on_stuck = [](const std::string& report) {  // a stage that never returns: this process cannot go on
        std::cerr << "train_gpt: " << report << "\n";
        std::_Exit(1);
    };
    tpipe::cpu_engine engine(over_mpi ? 1 : ranks * D);
    std::vector<std::unique_ptr<tpipe::thread_group>> groups;  // replicas on threads: one group per stage
    if (!over_mpi && D > 1)
        for (int s = 0; s < stages; ++s) groups.push_back(std::make_unique<tpipe::thread_group>(D));
    for (auto& r : reps) {
        std::vector<bool> here(static_cast<std::size_t>(stages));
        for (int s = 0; s < stages; ++s) here[s] = where.runs(r->index, prog.stage_rank[s]);
        r->build(stages, threads_per_part, here);
        r->model->set_recompute(o.recompute);
        tpipe::run_options opts = ro;
        if (!over_mpi) {
            for (int k = 0; k < ranks; ++k) opts.device_of_rank.push_back(r->index * ranks + k);
            if (D > 1) {
                for (auto& g : groups) r->members.push_back(g->member(r->index));
                std::vector<tpipe::thread_communicator*> comms;
                for (auto& m : r->members) comms.push_back(&m);
                r->dp_threads = std::make_unique<tpipe::data_parallel<tpipe::thread_communicator>>(
                    r->model->pipe(), comms, tpipe::data_parallel_options{.shard = o.shard_optimizer});
                opts.after_backward = r->dp_threads->hook();
                if (o.shard_optimizer) r->shard_optimizer(*r->dp_threads);
            }
            r->local_runner = std::make_unique<replica::local_runner_t>(r->model->pipe(), prog, engine, opts);
        }
#ifdef TPIPE_GPT_MPI
        else {
            mpi->connect(*r, prog, engine, opts, o.shard_optimizer);
        }
#endif
    }

    // The non-pipelined reference for --check: same init, data and optimizer, one unit per step
    // over the batches of every replica together.
    std::unique_ptr<gpt::parameters<float>> ref;
    std::unique_ptr<gpt::adamw<float>> ref_opt;
    if (o.check) {
        ref = std::make_unique<gpt::parameters<float>>(o.cfg);
        ref->init(o.seed);
        ref_opt = std::make_unique<gpt::adamw<float>>(*ref, gpt::adamw_options{.lr = o.lr});
    }

    // The first replica's whole weights or gradients (--check), gathered from its stages.
    auto whole_of = [&](bool gradients) {
#ifdef TPIPE_GPT_MPI
        if (mpi) return mpi->whole(*reps.front(), gradients);
#endif
        return reps.front()->state->whole(gradients);
    };
    const double tokens_per_step = double(o.batch) * o.cfg.seq_len * D;
    double worst_loss = 0, elapsed = 0, first_loss = 0, last_loss = 0, first_grad_err = 0, first_loss_err = 0;
    bool replicas_identical = true;
    std::vector<double> iter_times;
    tpipe::run_stats stats;
    std::vector<std::uint64_t> streams;  // every replica's data stream (all are needed by --check)
    for (int d = 0; d < D; ++d) streams.push_back(replica::data_seed(o, d));
    int first_step = 1;
    if (!o.ckpt.resume.empty()) {  // every replica here from the checkpoint; its data streams
        gpt::training_position at;
        for (auto& r : reps) at = gpt::load_checkpoint(o.ckpt.resume, o.cfg, {.lr = o.lr}, *r->state);
        if (at.step > o.steps)  // equal: a finished run restarted (a restart loop), its checkpoint the result
            throw usage_error("--resume " + o.ckpt.resume + ": the checkpoint has trained " + std::to_string(at.step) +
                              " steps, more than --steps " + std::to_string(o.steps) + " (raise --steps)");
        first_step = static_cast<int>(at.step) + 1;
        for (int d = 0; d < D; ++d)
            if (d < static_cast<int>(at.data_streams.size())) streams[d] = at.data_streams[d];
            else for (std::int64_t k = 0; k < at.step; ++k) gpt::sample_batch(text, o.batch, o.cfg.seq_len, streams[d]);
        if (speaks && !o.json) std::cout << "resumed from step " << at.step << " (" << o.ckpt.resume << ")\n";
    }
    std::unique_ptr<gpt::checkpointer> saver;
    std::vector<gpt::stage_states<float>*> states_here(static_cast<std::size_t>(D), nullptr);  // by replica
    for (auto& r : reps) states_here[static_cast<std::size_t>(r->index)] = r->state.get();
    if (!o.ckpt.save.empty()) {
        gpt::checkpoint_place place{.stage_rank = prog.stage_rank, .ranks = ranks, .my_rank = where.rank,
                                    .replicas = D, .sharded = o.shard_optimizer, .leader = speaks};
#ifdef TPIPE_GPT_MPI
        if (mpi) place.barrier = [&] { mpi->barrier(); };
#endif
        place.shape = tpipe::json::object{{"stages", stages}, {"ranks", ranks}, {"dp", D}, {"schedule", o.schedule},
                                          {"units", describe(units)}, {"transport", o.transport},
                                          {"shard_optimizer", o.shard_optimizer}};
        saver = std::make_unique<gpt::checkpointer>(o.ckpt, std::move(place), o.cfg, gpt::adamw_options{.lr = o.lr}, o.seed);
    }
    // SIGINT/SIGTERM: stop at a step boundary. Over MPI the processes agree on it first: a signal
    // reaches them at different times (or only some of them, as a scheduler's may).
    const tpipe_examples::stop_request stop(true);
    for (int step = first_step; step <= o.steps; ++step) {
        int stop_signal = stop.signal();
#ifdef TPIPE_GPT_MPI
        if (mpi) stop_signal = mpi->agree_max(stop_signal);
#endif
        if (stop_signal != 0) {
            const bool saves = saver && step - 1 >= first_step;  // the last step done is not lost
            if (saves) {
                saver->finish();
                if ((step - 1) % o.ckpt.every != 0) saver->save(step - 1, states_here, streams);
                saver->finish();
            }
            if (speaks || stop.requested())
                std::cerr << "train_gpt: " << stop.stopped_at(stop_signal, step - 1, o.steps)
                          << (saves ? ", saved in " + o.ckpt.save : std::string()) << "\n";
            return 128 + stop_signal;
        }
        std::vector<gpt::batch> batches;
        for (int d = 0; d < D; ++d) batches.push_back(gpt::sample_batch(text, o.batch, o.cfg.seq_len, streams[d]));
        const auto t0 = std::chrono::steady_clock::now();
        double loss = 0;
        if (!over_mpi) {
            std::vector<double> losses(reps.size());
            std::vector<tpipe::run_stats> all(reps.size());
            auto one = [&](std::size_t k) {
                replica& r = *reps[k];
                r.model->begin_step(batches[static_cast<std::size_t>(r.index)]);
                all[k] = r.local_runner->run(r.model->io());
                losses[k] = r.model->finish_step();
                if (o.shard_optimizer) {  // the replicas step together: their shards meet in collectives
                    auto pipeline = [](std::span<float>) -> tpipe::task<void> { co_return; };  // every stage is here
                    auto all = [&r](std::span<std::int64_t> v) { return r.members.front().all_reduce_sum(v); };
                    tpipe::sync_wait(r.sharded_step(*r.dp_threads, pipeline, all, o.check));
                }
            };
            tpipe::on_threads(reps.size(), one);  // replicas side by side, each run() on a thread of its own
            for (double l : losses) loss += l / D;
            stats = std::move(all.front());
        }
#ifdef TPIPE_GPT_MPI
        else {
            loss = mpi->step(*reps.front(), batches[static_cast<std::size_t>(where.first_replica())], stats, o.check);
        }
#endif
        if (!over_mpi && !o.shard_optimizer)
            for (auto& r : reps) r->state->step();  // per stage, the norm over every stage (under MPI: in mpi->step)
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (auto& r : reps) replicas_identical = replicas_identical && r->same_weights(*reps.front());
        elapsed += dt;
        iter_times.push_back(stats.time);
        if (!std::isfinite(loss))
        {
            std::ostringstream why;
            why << "step " << step << ": the loss is " << (std::isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf")
                << "; training diverged (lower --lr, now " << o.lr << ")";
            throw std::runtime_error(why.str());
        }
        double save_s = 0;  // the pause of saving: commit of the previous save, snapshot
        if (saver) {        // the snapshot is taken now; the disk writes overlap the next step
            const auto s0 = std::chrono::steady_clock::now();
            saver->after_step(step, states_here, streams);
            save_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
            elapsed += save_s;
        }
        if (step == first_step) first_loss = loss;
        last_loss = loss;
        double ref_loss = 0;
        if (ref) {
            ref_loss = gpt::full_step(*ref, concatenate(batches), hw);
            ref_opt->step(*ref);
            worst_loss = std::max(worst_loss, std::abs(loss - ref_loss) / std::abs(ref_loss));
            if (step == 1) {  // same weights, same batch: the pure pipelined-equals-sequential check
                first_loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
                first_grad_err = gpt::relative_difference(whole_of(true), ref->grad);
            }
        }
        const double tps = tokens_per_step * (step - first_step + 1) / elapsed;
        if (!speaks) continue;
        if (o.json) {
            tpipe::json::object line{{"step", step}, {"loss", loss}, {"tokens_per_s", tokens_per_step / dt},
                                     {"step_s", dt}, {"pipeline_s", stats.time}};
            if (ref) line["reference_loss"] = ref_loss;
            if (saver) line["save_s"] = save_s;
            std::cout << tpipe::json::dump(tpipe::json::value(std::move(line))) << std::endl;
        } else {
            const double eta = elapsed / (step - first_step + 1) * (o.steps - step);
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
    if (saver) saver->finish();
    std::string weights_fnv = gpt::fnv_hex(reps.front()->fingerprint(gpt::fnv_offset_basis));
#ifdef TPIPE_GPT_MPI
    if (mpi) {
        weights_fnv = mpi->fingerprint(*reps.front(), prog);
        replicas_identical = mpi->same_everywhere(weights_fnv) && replicas_identical;
    }
#endif
    if (!o.trace.empty() && speaks) {
        tpipe::write_file(o.trace, stats.trace("train_gpt last step"), "trace file");  // every write and the close checked
    }
    std::vector<double> sorted = iter_times;
    std::sort(sorted.begin(), sorted.end());
    const double median_iter = sorted.empty() ? 0.0 : sorted[sorted.size() / 2];  // empty: resumed at --steps
    const int steps_run = o.steps - first_step + 1;  // fewer than --steps after a --resume
    if (elapsed <= 0) elapsed = 1;                   // none ran (resumed at --steps): rates of 0, not 0/0
    tpipe::json::object summary{{"summary", true},
                                {"steps", o.steps},
                                {"first_loss", first_loss},
                                {"last_loss", last_loss},
                                {"tokens_per_s", tokens_per_step * std::max(0, steps_run) / elapsed},
                                {"median_pipeline_s", median_iter},
                                {"schedule", o.schedule},
                                {"ranks", ranks},
                                {"stages", stages},
                                {"dp", D},
                                {"transport", o.transport},
                                {"replicas_identical", replicas_identical},
                                {"weights_fnv", weights_fnv},
                                {"recompute", o.recompute},
                                {"predicted_peak_bytes", predicted_peak_bytes(o, reps, units)},
                                {"units", describe(units)}};
    if (planned_T > 0) {
        summary["planned_T_s"] = planned_T;
        summary["measured_over_planned"] = median_iter / planned_T;
    }
    int status = 0;
    if (ref) {
        const std::vector<float> final_weights = whole_of(false);
        const double werr = gpt::relative_difference(final_weights, ref->value);
        const bool ok = first_loss_err <= 1e-5 && first_grad_err <= 1e-5 && worst_loss <= o.check_tol &&
                        werr <= o.check_tol;
        summary["check_step1_loss_rel"] = first_loss_err;
        summary["check_step1_grad_rel"] = first_grad_err;
        summary["check_loss_rel"] = worst_loss;
        summary["check_weights_rel"] = werr;
        summary["check_ok"] = ok && replicas_identical;
        {  // which tensor drifted most (diagnostics)
            double worst_t = -1;
            std::string name;
            for (const auto& t : ref->lay.tensors) {
                const std::vector<float> a(final_weights.begin() + t.offset, final_weights.begin() + t.offset + t.size());
                const std::vector<float> b(ref->value.begin() + t.offset, ref->value.begin() + t.offset + t.size());
                const double e = gpt::relative_difference(a, b);
                if (e > worst_t) worst_t = e, name = t.name;
            }
            summary["check_worst_tensor"] = name + " " + std::to_string(worst_t);
        }
        if (!o.json && speaks)
            std::cout << "check against the non-pipelined run: step 1 loss " << first_loss_err << ", gradients "
                      << first_grad_err << " (tolerance 1e-5); loss curve " << worst_loss << ", final weights "
                      << werr << " (tolerance " << o.check_tol << ") relative difference: "
                      << (ok ? "MATCH" : "MISMATCH") << (D > 1 ? (replicas_identical ? "; replicas bitwise identical" : "; replicas DIFFER") : "") << "\n";
        if (!ok || !replicas_identical) status = 3;
    }
    if (!speaks) return status;
    if (o.json) {
        std::cout << tpipe::json::dump(tpipe::json::value(std::move(summary))) << "\n";
    } else {
        std::cout << "loss " << first_loss << " -> " << last_loss << "; " << tokens_per_step * std::max(0, steps_run) / elapsed
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
        const options o = parse(argc, argv);
        tpipe_examples::refuse_independent_copies("train_gpt", o.transport);
        int status = 0;
#ifdef TPIPE_GPT_MPI
        if (o.transport == "mpi") {
            tpipe::mpi::environment env(argc, argv);
            status = train(o);
        } else
#endif
            status = train(o);
        tpipe::close_standard_output();  // what was printed must have arrived (a full disk, /dev/full)
        return status;
    } catch (const usage_error& e) {
        std::cerr << "train_gpt: " << tpipe::printable(e.what()) << "\n(run train_gpt --help for the flags)\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "train_gpt: " << tpipe::printable(e.what()) << "\n";
        return 1;
    }
}
