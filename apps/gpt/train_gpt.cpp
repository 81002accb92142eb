// train_gpt: trains the reference GPT on a text file (byte-level tokens) with a tpipe pipeline
// on CPU threads. Run with no argument to train on the bundled tiny corpus.
//
//   train_gpt --stages 2 --schedule terapipe-1f1b --slicer terapipe --steps 60 --check
//
// Flags: train_flags.hpp (--help). The job's replicas, ranks and MPI plumbing: train_job.hpp.
// This file: the training loop. Exit status: 0 ok, 1 runtime failure (e.g. missing data file),
// 2 bad flags, 3 --check found a mismatch with the non-pipelined run.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <limits>
#include <optional>
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
#include "cli/flag_reader.hpp"
#include <tpipe/core/file.hpp>
#include <tpipe/core/quote.hpp>
#include <tpipe/core/json.hpp>
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/async/on_threads.hpp>
#include <tpipe/plan/memory_model.hpp>
#include <tpipe/exec/fingerprint.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>
#include <tpipe/slice/spec.hpp>

#include "checkpointing.hpp"
#include "elastic_command.hpp"
#include "train_flags.hpp"
#include "train_job.hpp"
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
#include <tpipe/async/sync_wait.hpp>
#endif

namespace {

using namespace train_gpt;
using tpipe_examples::usage_error;

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

//! The memory model's (tpipe/plan/memory_model.hpp) peak for this process: per stage here, fp32
//! weights and gradients, AdamW's two moments and its one-byte decay flag (17 B a parameter; the
//! last 9 divided by D with --shard-optimizer) and the activations its schedule keeps alive at
//! its peak (memory_model::peak_alive_bytes over the stage's actions in `prog`), plus a fixed
//! floor: the peak RSS of train_gpt with a negligible model (binary, libraries, allocator, thread
//! stacks, BLAS buffers; MPI's too under --transport mpi), measured in docs/memory.md.
double predicted_peak_bytes(const options& o, const std::vector<std::unique_ptr<replica>>& reps,
                            const tpipe::scheme& units, const tpipe::program& prog)
{
    // Under MPI each further process of the job adds its shared-memory segments (Open MPI 4.1's
    // vader): 21.5 MiB for process 0 of 2 processes, 28 MiB of 4 (docs/tensor_parallel.md).
    const int processes = o.tp * o.stages * o.dp;
    const double floor_bytes = (o.transport == "mpi" ? 17.0 + 3.5 * (processes - 1) : 10.0) * (1 << 20);
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
            // With --tp, 19 of the 27 are a tensor rank's share (qkv 3, attn 1, fc 4, act 4; dfc
            // 4, dqkv 3): 8 whole, 19 / T. With --sequence-parallel 4 of the 8 are a rank's
            // positions (x, xmid, dln2, dln1; the gathered ln1, ln2, dout and dproj stay whole),
            // and so is a unit's input under --recompute.
            const double optimizer = o.shard_optimizer ? 9.0 / o.dp : 9.0;  // sharded: 1/D of m, v and the decay flag
            const double by_position = o.sequence_parallel ? 4 : 0;
            tpipe::memory_options mo{.weight_bytes = 4, .gradient_bytes = 4, .master_bytes = 0, .optimizer_bytes = optimizer,
                                     .activation_bytes = (8 - by_position) * 4,
                                     .split_activation_bytes = (19 + by_position) * 4, .score_bytes = 4,
                                     .cache_bytes = 8, .embedding = held.first, .recompute = o.recompute,
                                     .input_bytes = o.sequence_parallel ? 4.0 / o.tp : 4.0};
            const tpipe::memory_model m(shape, std::max(1, held.layer_end - held.layer_begin), o.tp, o.cfg.seq_len, mo);
            std::vector<tpipe::action> mine;  // stage s's computes, in its rank's order
            for (const auto& a : prog.actions[static_cast<std::size_t>(prog.stage_rank[static_cast<std::size_t>(s)])])
                if (a.stage == s) mine.push_back(a);
            bytes += m.static_bytes() + m.peak_alive_bytes(units, mine);
        }
    return bytes;
}

//! --device cuda: the CUDA GPT (apps/gpt/cuda) under the same schedule, slicing and data.
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
    f.add("--slicer", o.slicer).add("--granularity", o.granularity).add("--dp", o.dp).add("--tp", o.tp).add("--scatter-gather", o.scatter_gather).add("--sequence-parallel", o.sequence_parallel).add("--device", o.device);
    f.add("--precision", o.precision).add("--check", o.check).add("--check-tol", o.check_tol);
    f.add("--elastic", o.elastic).add("--devices", o.el.opts.devices).add("--alpha", o.el.opts.alpha);
    f.add("--freeze-every", o.el.opts.freeze_every).add("--epochs", o.el.epochs).add("--max-frozen", o.el.opts.max_frozen);
    f.add("--cache-mb", o.el.opts.cache_bytes).add("--no-autopipe", !o.el.opts.autopipe);
    f.add("--no-autodp", !o.el.opts.autodp).add("--no-autocache", !o.el.opts.autocache);
    f.add("--record-plan", o.el.record_plan).add("--plan-from", o.el.plan_from);
    f.add("--recompute", o.recompute).add("--shard-optimizer", o.shard_optimizer).add("--save", o.ckpt.save).add("--save-every", o.ckpt.every);
    f.add("--keep", o.ckpt.keep).add("--resume", o.ckpt.resume);
    f.add("--data (content)", tpipe_examples::content_digest(text) + " (" + std::to_string(text.size()) + " bytes)");
    return f;
}

//! Where training starts, after a --resume: the step, the checkpoint it was read from (its
//! manifest's digest: the manifest holds every shard's checksum) and every replica's data
//! stream (the sampler's position). Processes of one MPI job must agree on it.
[[maybe_unused]] tpipe::fingerprint position_fingerprint(const options& o, int first_step, const std::vector<std::uint64_t>& streams)
{
    tpipe::fingerprint f;
    f.add("first step", first_step);
    if (!o.ckpt.resume.empty()) f.add("resumed checkpoint (manifest)", tpipe_examples::checkpoint_identity(o.ckpt.resume));
    std::string position;
    for (std::uint64_t s : streams) position += (position.empty() ? "" : ",") + std::to_string(s);
    f.add("data streams (sampler position)", position);
    return f;
}

//! The units of a step and their planned iteration time.
struct unit_plan {
    tpipe::scheme units;
    double planned_T = 0;  //!< seconds; 0: not planned (a fixed slicer)
};

//! --slicer terapipe: profiles the whole model's `stages` stages on replica 0's first batch and
//! plans the token slices (TeraPipe's DP). Only the process that `speaks` profiles (timings differ
//! between processes): the others get units from it.
unit_plan terapipe_plan(const options& o, const std::string& text, int stages, int threads_per_part, bool speaks)
{
    unit_plan p;
    const std::int64_t g = o.granularity > 0 ? o.granularity : std::max<std::int64_t>(1, o.cfg.seq_len / 16);
    if (o.cfg.seq_len % g != 0)
        throw usage_error("--granularity " + std::to_string(g) + " must divide --seq-len " +
                          std::to_string(o.cfg.seq_len));
    if (!speaks) return p;  // profiled by one process (timings differ between processes); the others get the plan
    gpt::parameters<float> whole_params(o.cfg);  // the whole model, for the profile only
    whole_params.init(o.seed);
    gpt::pipelined_model<float> whole(whole_params, stages, threads_per_part);
    std::uint64_t probe_rng = replica::data_seed(o, 0);  // replica 0's first batch
    const auto probe = gpt::sample_batch(text, o.batch, o.cfg.seq_len, probe_rng);
    const auto grid = tpipe::token_profile_grid(o.batch, o.cfg.seq_len, g);
    if (!o.json) std::cout << "profiling " << stages << " stage(s) over " << grid.tokens.size() << " lengths x "
                           << grid.contexts.size() + 1 << " contexts x " << grid.rows.size() << " row counts...\n";
    const auto latency = gpt::profile_parts(whole, probe, grid);
    const auto plan = tpipe::plan_slices(
        latency, tpipe::slicing_problem{.stages = stages, .seq_len = o.cfg.seq_len, .batch = o.batch,
                                        .granularity = g});
    p.units = plan.scheme();
    p.planned_T = plan.objective;
    const auto& dl = latency.parts.back().delta();
    if (o.json) {
        tpipe::json::object m{{"plan", describe(p.units)}, {"planned_T_s", plan.objective}, {"t_max_s", plan.t_max},
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
        std::cout << "TeraPipe plan: " << describe(p.units) << "; planned T = " << plan.objective * 1e3
                  << " ms per iteration (" << plan.units() << " units, t_max " << plan.t_max * 1e3 << " ms)\n";
    }
    return p;
}

//! --elastic: PipeTransformer's driver (elastic_command.hpp) with this run's model, data and flags.
int train_elastic(const options& o, const std::string& text)
{
    gpt::elastic_command c = o.el;
    c.cfg = o.cfg;
    c.json = o.json;
    c.check = o.check;
    c.transport = o.transport;
    c.link = o.link;
    c.ckpt = o.ckpt;
    c.opts.batch = o.batch;
    c.opts.steps = o.steps_given ? o.steps : 0;
    c.opts.threads = o.threads;
    c.opts.seed = o.seed;
    c.opts.opt.lr = o.lr;
    if (o.slicer == "terapipe")  // token slices inside the elastic pipeline, re-planned at every re-plan
        c.opts.terapipe_granularity = o.granularity > 0 ? o.granularity : std::max<std::int64_t>(1, o.cfg.seq_len / 16);
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

//! What one step printed: a JSON line (--json), else a progress line.
struct step_line {
    int step = 0;
    double loss = 0, step_s = 0, pipeline_s = 0;
    std::optional<double> reference_loss;  //!< --check
    std::optional<double> save_s;          //!< --save
    double tokens_per_s = 0;               //!< this step's
    double mean_tokens_per_s = 0, eta_s = 0;  //!< since the run (or its resume) began
};

void print_step(const options& o, const step_line& l, bool tty)
{
    if (o.json) {
        tpipe::json::object line{{"step", l.step}, {"loss", l.loss}, {"tokens_per_s", l.tokens_per_s},
                                 {"step_s", l.step_s}, {"pipeline_s", l.pipeline_s}};
        if (l.reference_loss) line["reference_loss"] = *l.reference_loss;
        if (l.save_s) line["save_s"] = *l.save_s;
        std::cout << tpipe::json::dump(tpipe::json::value(std::move(line))) << std::endl;
        return;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf, "step %4d/%d  loss %.4f  %8.0f tok/s  ETA %s", l.step, o.steps, l.loss,
                  l.mean_tokens_per_s, clock_text(l.eta_s).c_str());
    // A kept line every ~5% of the steps (the loss curve); on a terminal the line in between is
    // rewritten in place.
    const bool keep = l.step == 1 || l.step == o.steps || l.step % std::max(1, o.steps / 20) == 0;
    const std::string ref_text = l.reference_loss ? "  (non-pipelined " + std::to_string(*l.reference_loss) + ")" : std::string();
    if (keep)
        std::cout << (tty ? "\r\033[K" : "") << buf << ref_text << "\n" << std::flush;
    else if (tty)
        std::cout << "\r\033[K" << buf << std::flush;
}

//! --resume: every replica here from the checkpoint, and every replica's data stream where the
//! checkpoint left it. Returns the first step to run.
//! `run`: the run the checkpoint belongs to, which this one continues.
int resume(const options& o, const std::string& text, const std::vector<std::unique_ptr<replica>>& reps,
           std::vector<std::uint64_t>& streams, bool speaks, std::string& run)
{
    gpt::training_position at;
    for (auto& r : reps) at = gpt::load_checkpoint(o.ckpt.resume, o.cfg, {.lr = o.lr}, *r->state);
    if (at.step > o.steps)  // equal: a finished run restarted (a restart loop), its checkpoint the result
        throw usage_error("--resume " + o.ckpt.resume + ": the checkpoint has trained " + std::to_string(at.step) +
                          " steps, more than --steps " + std::to_string(o.steps) + " (raise --steps)");
    for (std::size_t d = 0; d < streams.size(); ++d)
        if (d < at.data_streams.size()) streams[d] = at.data_streams[d];
        else for (std::int64_t k = 0; k < at.step; ++k) gpt::sample_batch(text, o.batch, o.cfg.seq_len, streams[d]);
    if (speaks && !o.json) std::cout << "resumed from step " << at.step << " (" << o.ckpt.resume << ")\n";
    run = at.run;
    return static_cast<int>(at.step) + 1;
}

//! --check: the non-pipelined reference run (same init, data and optimizer, one unit per step over
//! the batches of every replica together), and how far the pipelined run strays from it.
struct reference_run {
    std::unique_ptr<gpt::parameters<float>> params;
    std::unique_ptr<gpt::adamw<float>> opt;
    double worst_loss = 0;      //!< the loss curve's largest relative difference
    double first_loss_err = 0;  //!< step 1 (same weights, same batch): the pure pipelined-equals-sequential check
    double first_grad_err = 0;

    explicit reference_run(const options& o) : params(std::make_unique<gpt::parameters<float>>(o.cfg))
    {
        params->init(o.seed);
        opt = std::make_unique<gpt::adamw<float>>(*params, gpt::adamw_options{.lr = o.lr});
    }

    //! The reference's step on the same batches; tallies the pipelined step's `loss` (and at step
    //! 1 its gradients, from `pipelined_grads()`) against it. Returns the reference's loss.
    template <class Grads>
    double step(int step, double loss, const std::vector<gpt::batch>& batches, int threads, Grads pipelined_grads)
    {
        const double ref_loss = gpt::full_step(*params, concatenate(batches), threads);
        opt->step(*params);
        worst_loss = std::max(worst_loss, std::abs(loss - ref_loss) / std::abs(ref_loss));
        if (step == 1) {
            first_loss_err = std::abs(loss - ref_loss) / std::abs(ref_loss);
            first_grad_err = gpt::relative_difference(pipelined_grads(), params->grad);
        }
        return ref_loss;
    }

    //! The verdict on the pipelined run's `final_weights`, into `summary` and (unless --json) said.
    bool verdict(const options& o, const std::vector<float>& final_weights, bool replicas_identical, bool speaks,
                 tpipe::json::object& summary) const
    {
        const double werr = gpt::relative_difference(final_weights, params->value);
        const bool ok = first_loss_err <= 1e-5 && first_grad_err <= 1e-5 && worst_loss <= o.check_tol &&
                        werr <= o.check_tol;
        summary["check_step1_loss_rel"] = first_loss_err;
        summary["check_step1_grad_rel"] = first_grad_err;
        summary["check_loss_rel"] = worst_loss;
        summary["check_weights_rel"] = werr;
        summary["check_ok"] = ok && replicas_identical;
        double worst_t = -1;  // which tensor drifted most (diagnostics)
        std::string name;
        for (const auto& t : params->lay.tensors) {
            const std::vector<float> a(final_weights.begin() + t.offset, final_weights.begin() + t.offset + t.size());
            const std::vector<float> b(params->value.begin() + t.offset, params->value.begin() + t.offset + t.size());
            const double e = gpt::relative_difference(a, b);
            if (e > worst_t) worst_t = e, name = t.name;
        }
        summary["check_worst_tensor"] = name + " " + std::to_string(worst_t);
        if (!o.json && speaks)
            std::cout << "check against the non-pipelined run: step 1 loss " << first_loss_err << ", gradients "
                      << first_grad_err << " (tolerance 1e-5); loss curve " << worst_loss << ", final weights "
                      << werr << " (tolerance " << o.check_tol << ") relative difference: "
                      << (ok ? "MATCH" : "MISMATCH")
                      << (o.dp > 1 ? (replicas_identical ? "; replicas bitwise identical" : "; replicas DIFFER") : "") << "\n";
        return ok && replicas_identical;
    }
};

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
    if (o.elastic) return train_elastic(o, text);
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
        mpi = std::make_unique<mpi_job>(ranks, D, o.tp, std::chrono::seconds(o.watchdog), o.link);
        where = mpi->where;
    }
#endif
    const bool speaks = where.process == 0;  // one process prints
    const int hw = o.threads > 0 ? o.threads : std::max(1u, std::thread::hardware_concurrency());
    const int threads_per_part = std::max(1, hw / (ranks * D * o.tp));
    const bool tty = !o.json && speaks && isatty(STDOUT_FILENO);

    // The replicas this process holds: each its weights, data stream and optimizer; their
    // pipelines are built once the program is known.
    // With --tp on threads, one per tensor rank of each replica (replica-major, as the layout orders them).
    std::vector<std::unique_ptr<replica>> reps;
    const int tensor_here = over_mpi ? 1 : o.tp;  // tensor ranks of a replica on this process
    for (int d = 0; d < D; ++d)
        if (where.has_replica(d))
            for (int k = 0; k < tensor_here; ++k) reps.push_back(std::make_unique<replica>(o, d, over_mpi ? where.tensor.rank : k));

    // The units of every step: a fixed slicer, or the TeraPipe plan for this model's stages.
    unit_plan plan;
    if (o.slicer == "terapipe") {
#ifdef TPIPE_GPT_MPI
        if (mpi) {
            {  // the others wait in share() meanwhile, for as long as this process answers
                const auto busy = speaks ? mpi->busy("profiling the TeraPipe plan") : tpipe::mpi::busy_section();
                plan = terapipe_plan(o, text, stages, threads_per_part, speaks);
            }
            plan.units = mpi->share(plan.units, plan.planned_T);
        } else
#endif
            plan = terapipe_plan(o, text, stages, threads_per_part, speaks);
    } else {
        plan.units = fixed_scheme(o);
    }
    const tpipe::scheme& units = plan.units;
    const double planned_T = plan.planned_T;
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
                  << threads_per_part << " thread(s) per stage"
                  << (o.tp > 1 ? ", " + std::to_string(o.tp) + " tensor ranks per stage" : std::string()) << "\n"
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
    // Replicas on threads: one group per stage (per stage and tensor rank with --tp); tensor ranks
    // on threads: one group per replica and stage, and one per replica for the clip's squares.
    std::vector<std::unique_ptr<tpipe::thread_group>> groups, tensor_groups;
    if (!over_mpi && D > 1)
        for (int g = 0; g < stages * o.tp; ++g) groups.push_back(std::make_unique<tpipe::thread_group>(D));
    if (!over_mpi && o.tp > 1)
        for (int g = 0; g < D * (stages + 1); ++g) tensor_groups.push_back(std::make_unique<tpipe::thread_group>(o.tp));
    for (auto& r : reps) {
        std::vector<bool> here(static_cast<std::size_t>(stages));
        for (int s = 0; s < stages; ++s) here[s] = where.runs(r->index, prog.stage_rank[s]);
        r->build(stages, threads_per_part, here, {r->tensor_rank, o.tp});
        r->model->set_recompute(o.recompute);
        tpipe::run_options opts = ro;
        if (!over_mpi) {
            if (o.tp > 1) {  // this tensor rank's stages sum over their groups; each blocks its loop meanwhile
                for (int s = 0; s <= stages; ++s)
                    r->tensor_members.push_back(tensor_groups[static_cast<std::size_t>(r->index * (stages + 1) + s)]->member(r->tensor_rank));
                for (int s = 0; s < stages; ++s) {
                    r->tensor_sums.push_back(std::make_unique<replica::tensor_sum>(r->tensor_members[static_cast<std::size_t>(s)]));
                    r->join_tensor_group(s, stages, *r->tensor_sums.back());
                }
                // A loop per rank of its own: a stage blocked in its group's sum must not hold the loop
                // another pipeline's rank needs (docs/runtime.md, "Three axes").
                r->engine = std::make_unique<tpipe::cpu_engine>(ranks, tpipe::cpu_engine::options{.threads = ranks});
            } else {
                for (int k = 0; k < ranks; ++k) opts.device_of_rank.push_back(r->index * ranks + k);
            }
            if (D > 1) {
                for (int s = 0; s < stages; ++s)
                    r->members.push_back(groups[static_cast<std::size_t>(r->tensor_rank * stages + s)]->member(r->index));
                std::vector<tpipe::thread_communicator*> comms;
                for (auto& m : r->members) comms.push_back(&m);
                r->dp_threads = std::make_unique<tpipe::data_parallel<tpipe::thread_communicator>>(
                    r->model->pipe(), comms, tpipe::data_parallel_options{.shard = o.shard_optimizer});
                opts.after_backward = r->dp_threads->hook();
                if (o.shard_optimizer) r->shard_optimizer(*r->dp_threads);
            }
            r->runner = std::make_unique<replica::runner_t>(r->model->pipe(), prog, r->engine ? *r->engine : engine, opts);
        }
#ifdef TPIPE_GPT_MPI
        else {
            mpi->connect(*r, prog, engine, opts, o.shard_optimizer);
        }
#endif
    }

    std::unique_ptr<reference_run> ref;  // --check
    if (o.check) ref = std::make_unique<reference_run>(o);

    // The first replica's whole weights or gradients (--check), gathered from its stages.
    // Elements [first, first + count) of the whole model's weights or gradients.
    auto whole_piece = [&](bool gradients, std::int64_t first, std::int64_t count) {
#ifdef TPIPE_GPT_MPI
        if (mpi) return mpi->whole(*reps.front(), gradients, first, count);
#endif
        std::vector<float> w = reps.front()->state->whole(gradients, first, count);
        for (int k = 1; k < tensor_here; ++k) {  // --tp on threads: each element is one tensor rank's
            const std::vector<float> share = reps[static_cast<std::size_t>(k)]->state->whole(gradients, first, count);
            for (std::size_t i = 0; i < w.size(); ++i) w[i] += share[i];
        }
        return w;
    };
    auto whole_of = [&](bool gradients) { return whole_piece(gradients, 0, reps.front()->state->whole_size()); };
    const double tokens_per_step = double(o.batch) * o.cfg.seq_len * D;
    double elapsed = 0, first_loss = 0, last_loss = 0;
    bool replicas_identical = true;
    std::vector<double> iter_times;
    tpipe::run_stats stats;
    std::vector<std::uint64_t> streams;  // every replica's data stream (all are needed by --check)
    for (int d = 0; d < D; ++d) streams.push_back(replica::data_seed(o, d));
    std::string run;  // the run continued ("": a new one)
    const int first_step = o.ckpt.resume.empty() ? 1 : resume(o, text, reps, streams, speaks, run);
#ifdef TPIPE_GPT_MPI
    // The launch fingerprint agreed on the flags, not on what they found: processes resumed from
    // other checkpoints (another working directory, a newer save) would train on apart.
    if (mpi) tpipe::mpi::agree(MPI_COMM_WORLD, position_fingerprint(o, first_step, streams).text(), "");
#endif
    std::unique_ptr<gpt::checkpointer> saver;
    std::vector<gpt::stage_states<float>*> states_here(static_cast<std::size_t>(D), nullptr);  // by replica
    for (auto& r : reps) states_here[static_cast<std::size_t>(r->index)] = r->state.get();
    if (!o.ckpt.save.empty()) {
        gpt::checkpoint_place place{.stage_rank = prog.stage_rank, .ranks = ranks, .my_rank = where.rank,
                                    .replicas = D, .sharded = o.shard_optimizer, .tensor = where.tensor,
                                    .leader = speaks, .run = run};
#ifdef TPIPE_GPT_MPI
        if (mpi) place.barrier = [&] { mpi->barrier(); };
#endif
        place.shape = tpipe::json::object{{"stages", stages}, {"ranks", ranks}, {"dp", D}, {"tp", o.tp}, {"schedule", o.schedule},
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
                all[k] = r.runner->run(r.model->io());
                losses[k] = r.model->finish_step();
                // The clip's squares of a tensor rank's shares, summed over its replica's tensor group.
                auto over_tensor_group = [&r](std::span<std::int64_t> v) -> tpipe::task<void> {
                    if (!r.tensor_members.empty()) co_await r.tensor_members.back().all_reduce_sum(v);
                };
                if (o.shard_optimizer) {  // the replicas step together: their shards meet in collectives
                    auto pipeline = [](std::span<float>) -> tpipe::task<void> { co_return; };  // every stage is here
                    auto all = [&r, over_tensor_group](std::span<std::int64_t> v) -> tpipe::task<void> {
                        co_await r.members.front().all_reduce_sum(v);
                        co_await over_tensor_group(v);
                    };
                    tpipe::sync_wait(r.sharded_step(*r.dp_threads, pipeline, all, o.check));
                } else if (o.tp > 1) {  // the tensor ranks step together: the norm is over every share
                    auto pipeline = [](std::span<float>) -> tpipe::task<void> { co_return; };
                    tpipe::sync_wait(r.step_stages(pipeline, over_tensor_group));
                }
            };
            // Replicas side by side, each run() on a thread of its own. One that fails cancels the
            // groups the others may wait in for it: its tensor sums, the replicas' gradients.
            tpipe::on_threads(reps.size(), one, [&] {
                for (auto& g : tensor_groups) g->cancel();
                for (auto& g : groups) g->cancel();
            });
            for (std::size_t k = 0; k < reps.size(); ++k)  // tensor rank 0's: the others have the same loss
                if (reps[k]->tensor_rank == 0) loss += losses[k] / D;
            stats = std::move(all.front());
        }
#ifdef TPIPE_GPT_MPI
        else {
            loss = mpi->step(*reps.front(), batches[static_cast<std::size_t>(where.first_replica())], stats, o.check);
        }
#endif
        if (!over_mpi && !o.shard_optimizer && o.tp == 1)
            for (auto& r : reps) r->state->step();  // per stage, the norm over every stage (under MPI: in mpi->step)
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        for (auto& r : reps)  // against replica 0's share of the same tensor rank (replica 0's come first)
            replicas_identical = replicas_identical && r->same_weights(*reps[static_cast<std::size_t>(over_mpi ? 0 : r->tensor_rank)]);
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
        const double ref_loss = ref ? ref->step(step, loss, batches, hw, [&] { return whole_of(true); }) : 0.0;
        if (!speaks) continue;
        const int done = step - first_step + 1;
        print_step(o,
                   step_line{.step = step, .loss = loss, .step_s = dt, .pipeline_s = stats.time,
                             .reference_loss = ref ? std::optional<double>(ref_loss) : std::nullopt,
                             .save_s = saver ? std::optional<double>(save_s) : std::nullopt,
                             .tokens_per_s = tokens_per_step / dt, .mean_tokens_per_s = tokens_per_step * done / elapsed,
                             .eta_s = elapsed / done * (o.steps - step)},
                   tty);
    }
    if (saver) saver->finish();
    // With --tp, of the shares put together (the whole model's vector), as under MPI.
    std::string weights_fnv =
        o.tp > 1 && !over_mpi ? gpt::fnv_hex_by_pieces(reps.front()->state->whole_size(),
                                                       [&](std::int64_t first, std::int64_t count) { return whole_piece(false, first, count); })
                              : gpt::fnv_hex(reps.front()->fingerprint(gpt::fnv_offset_basis));
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
                                {"tp", o.tp},
                                {"transport", o.transport},
                                {"link", o.transport == "mpi" ? o.link : std::string()},
                                {"replicas_identical", replicas_identical},
                                {"weights_fnv", weights_fnv},
                                {"recompute", o.recompute},
                                {"predicted_peak_bytes", predicted_peak_bytes(o, reps, units, prog)},
                                {"units", describe(units)}};
    if (o.tp > 1 && steps_run > 0) {
        // Over the step's positions N = batch x seq-len. A stage crosses N x d_model floats at each
        // boundary it has: its output (not the last stage) forward, its input's gradient (not
        // stage 0) backward. It hands the pipeline all of them, 1/T with --scatter-gather
        // (counted by this process's stages: tensor rank 0's on threads), its own positions with
        // --sequence-parallel: Nk of them, and its group's collectives run on P, each unit's
        // positions padded to a multiple of T (gpt::sequence_share).
        const double N = double(o.batch) * o.cfg.seq_len, d = o.cfg.d_model;
        double Nk = 0, P = 0;
        for (int i = 0; i < units.units(); ++i) {
            const auto share = gpt::sequence_share::of(units.at(i).rows() * units.at(i).tokens(), o.tp, reps.front()->tensor_rank);
            Nk += static_cast<double>(share.count);
            P += static_cast<double>(share.per_rank * o.tp);
        }
        double boundary = 0;
        for (int s = 0; s < stages; ++s)
            if (reps.front()->state->holds(s)) boundary += ((s > 0) + (s + 1 < stages)) * d;
        summary["pipeline_bytes_sent_per_step"] = static_cast<double>(reps.front()->pipeline_bytes_sent()) / steps_run;
        summary["pipeline_bytes_closed_form"] =
            boundary * sizeof(float) * (o.sequence_parallel ? Nk : N / (o.scatter_gather ? o.tp : 1));
#ifdef TPIPE_GPT_MPI
        if (mpi) {
            // Counted by the tensor communicator, beside the closed form of what its ring sends:
            // (T - 1) / T of every reduce-scatter's and all-gather's floats, and of an all-reduce's
            // twice (its two halves). Per step, counted in such halves:
            // - per layer, 4 sums forward (2 more with --recompute, whose backward runs the forward
            //   again) and 2 backward, of N x d_model each: 2 halves apiece. With
            //   --sequence-parallel each sum is one reduce-scatter, and an all-gather of P x d_model
            //   goes with it;
            // - the first stage's embedding N x d_model (twice with --recompute); with
            //   --sequence-parallel a reduce-scatter each, and its gradient's all-gather;
            // - the last stage's head N x d_model; with --sequence-parallel its input's all-gather
            //   and its gradient's reduce-scatter; its cross-entropy's maxima and sums N x (T + 2);
            // - with --sequence-parallel, the LayerNorms' gradients: 2 x d_model per LayerNorm;
            // - with --scatter-gather, every boundary's floats all-gathered: 1 half.
            const double redo = o.recompute ? 2 : 1, Np = o.sequence_parallel ? P : N;
            double halves = 0;
            for (int s = 0; s < stages; ++s)
                if (reps.front()->state->holds(s)) {
                    const auto& h = reps.front()->state->params(s).lay.held;
                    const double layers = h.layer_end - h.layer_begin;
                    halves += layers * (4 * redo + 4) * Np * d;
                    if (h.first) halves += (o.sequence_parallel ? redo + 1 : 2 * redo) * Np * d;
                    if (h.last) halves += 2 * Np * d + 2 * N * (o.tp + 2);
                    if (o.sequence_parallel) halves += 2 * (4 * layers + (h.last ? 2 : 0)) * d;
                }
            if (o.scatter_gather) halves += boundary * N;
            summary["tensor_bytes_sent_per_step"] = static_cast<double>(mpi->tensor_bytes_sent()) / steps_run;
            summary["tensor_bytes_closed_form"] = halves * sizeof(float) * (o.tp - 1) / o.tp;
        }
#endif
    }
    if (planned_T > 0) {
        summary["planned_T_s"] = planned_T;
        summary["measured_over_planned"] = median_iter / planned_T;
    }
    int status = 0;
    if (ref && !ref->verdict(o, whole_of(false), replicas_identical, speaks, summary)) status = 3;
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

//! After the reason is printed: a failure of one MPI process ends every process of the job (the
//! others may be waiting for it in a collective, a checkpoint's barrier say).
void end_job(int status)
{
#ifdef TPIPE_GPT_MPI
    tpipe::mpi::end_job_on_error(status);
#else
    (void)status;
#endif
}

} // namespace

int main(int argc, char** argv)
{
    try {
        tpipe_examples::prepare_process("train_gpt");  // SIGXFSZ and SIGPIPE become errors; ulimit -s
        const options o = parse(argc, argv);
        tpipe_examples::refuse_independent_copies("train_gpt", o.transport);
        int status = 0;
#ifdef TPIPE_GPT_MPI
        if (o.transport == "mpi") {
            // --watchdog bounds the set-up too (the launch agreement, the job's communicators, the
            // runner's agree): a process stopped before the first step is named, and the job ends.
            tpipe::mpi::environment_options eo;
            eo.watchdog = std::chrono::seconds(o.watchdog);
            tpipe::mpi::environment env(argc, argv, eo);
            status = train(o);
        } else
#endif
            status = train(o);
        // What was printed must have arrived (a full disk, /dev/full); a run stopped because its
        // standard output was closed has said so already.
        if (status != 128 + SIGPIPE) tpipe::close_standard_output();
        return status;
    } catch (const usage_error& e) {
        std::cerr << "train_gpt: " << tpipe::printable(e.what()) << "\n(run train_gpt --help for the flags)\n";
        end_job(2);
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "train_gpt: " << tpipe::printable(e.what()) << "\n";
        end_job(1);
        return 1;
    }
}
