// The libtorch GPT trained plainly and pipelined (see training.hpp). The regions between
// [snippet:...] markers are the code shown in docs/libtorch.md (tools/snippets.py keeps them equal).
#include "training.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include <torch/torch.h>

#include <tpipe/adapters/libtorch.hpp>
#include <tpipe/async/on_threads.hpp>
#include <tpipe/comm/blocking_group.hpp>
#include <tpipe/comm/thread_communicator.hpp>
#include <tpipe/core/checked.hpp>
#include <tpipe/core/file.hpp>
#include <tpipe/exec/run.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/spec.hpp>
#include <tpipe/state/checkpoint_writer.hpp>
#include <tpipe/state/checksum.hpp>

#ifdef TPIPE_LIBTORCH_GPT_MPI
#include <tpipe/async/sync_wait.hpp>
#include <tpipe/comm/every_member.hpp>
#include <tpipe/mpi/communicator.hpp>
#include <tpipe/mpi/job.hpp>
#include <tpipe/mpi/transport.hpp>

#include "../common/links.hpp"
#endif

#include "corpus.hpp"
#include "gpt.hpp"
#include "parts.hpp"

namespace libtorch_gpt {

namespace F = torch::nn::functional;

std::string checksum_of(const std::vector<double>& weights)
{
    tpipe::state::checksum sum(tpipe::state::checksum_kind::fnv1a64);
    sum.update(std::as_bytes(std::span<const double>(weights)));
    return sum.hex();  // its own width: 16 digits of FNV-1a (a 32-bit CRC printed as 64 bits began with 8 zeros)
}

double relative_difference(const std::vector<double>& a, const std::vector<double>& b)
{
    if (a.size() != b.size()) return INFINITY;
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

namespace {

//! Module cuts: the embeddings on the first stage, the head on the last, blocks spread evenly.
std::vector<std::size_t> even_cuts(std::int64_t layers, int stages)
{
    if (stages < 1 || stages > layers)
        throw tpipe::invalid_argument("--stages " + std::to_string(stages) + ": every stage needs at least one of the " +
                                      std::to_string(layers) + " blocks (use 1.." + std::to_string(layers) + ")");
    std::vector<std::size_t> cuts{0};
    std::size_t at = 1;  // after the embeddings
    for (int i = 0; i < stages; ++i) {
        at += static_cast<std::size_t>(layers / stages + (i < layers % stages ? 1 : 0));
        cuts.push_back(i + 1 == stages ? at + 1 : at);  // the last stage also runs the head
    }
    return cuts;
}

//! The model's cuts into the stages of `prog`, a schedule's program over o.stages ranks: more
//! stages than ranks when it places several on each (interleaved, zb-v: prog.stage_rank).
std::vector<std::size_t> model_cuts(const options& o, const tpipe::program& prog)
{
    const int stages = prog.stages();
    if (stages != o.stages && stages > o.layers)
        throw tpipe::invalid_argument("--stages " + std::to_string(o.stages) + " with --schedule " + o.schedule + " makes " +
                                      std::to_string(stages) + " pipeline stages (" + std::to_string(stages / o.stages) +
                                      " on each rank), but the model has " + std::to_string(o.layers) +
                                      " blocks: every stage needs at least one (raise --layers to " + std::to_string(stages) +
                                      ", or pick a schedule with a stage per rank: 1f1b, zb-h1, ...)");
    return even_cuts(o.layers, stages);
}

//! The stages of `prog` that rank `r` runs, in stage order.
std::vector<int> stages_on(const tpipe::program& prog, int r)
{
    std::vector<int> out;
    for (int s = 0; s < prog.stages(); ++s)
        if (prog.stage_rank[static_cast<std::size_t>(s)] == r) out.push_back(s);
    return out;
}

tpipe::json::value model_json(const config& c)
{
    return tpipe::json::object{{"model", "libtorch_gpt"}, {"vocab", c.vocab},   {"seq_len", c.seq_len},
                               {"d_model", c.d_model},     {"heads", c.heads},   {"layers", c.layers}};
}

//! Checkpoints of a pipelined run: every process saves the stages it runs (one shard each), the
//! first process commits; a resume loads every stage by name, whatever the saver's cut.
class checkpoints {
public:
    checkpoints(const options& o, int stages, std::function<void()> barrier, bool leader)
        : o_(o), out_(o.save.empty() ? std::nullopt
                                     : std::optional<tpipe::state::checkpoint_writer>(std::in_place,
                                           tpipe::state::writer_options{.root = o.save, .keep = o.keep, .run = resumed_run(o),
                                                                        .leader = leader,
                                                                        .shards = stages, .barrier = std::move(barrier)}))
    {
    }

    //! After step `step` (1-based): saves stages `mine` of `pipe` every save_every steps.
    void after_step(int step, tpipe::uniform_pipeline<tpipe::libtorch::module_stage>& pipe, const std::vector<int>& mine,
                    const torch::optim::AdamW& opt, const corpus& data, const config& cfg)
    {
        if (!out_) return;
        out_->finish();  // the previous save overlapped a step of training; commit it
        if (step % o_.save_every != 0) return;
        tpipe::state::manifest m;
        m.step = step;
        m.model = model_json(cfg);
        m.optimizer = tpipe::libtorch::adamw_json(opt);
        m.rng = tpipe::json::object{{"seed", static_cast<std::int64_t>(o_.seed)}, {"data_sampler", data.position()}};
        m.shape = tpipe::json::object{{"transport", o_.transport}, {"stages", o_.stages}, {"schedule", o_.schedule},
                                      {"slicer", o_.slicer}};
        std::vector<tpipe::state::shard_snapshot> shards;
        for (int i : mine) {
            shards.emplace_back("stage-" + std::to_string(i) + ".bin");
            tpipe::libtorch::add_stage(shards.back(), pipe.stage(static_cast<std::size_t>(i)), opt);
        }
        out_->begin(std::move(m), std::move(shards));
    }
    void finish()
    {
        if (out_) out_->finish();
    }

    //! Loads every stage of `pipe` and the sampler's position from o.resume; returns the step.
    static int resume(const options& o, tpipe::uniform_pipeline<tpipe::libtorch::module_stage>& pipe,
                      torch::optim::AdamW& opt, corpus& data, const config& cfg)
    {
        const tpipe::state::checkpoint_reader in(o.resume);
        const auto& m = in.contents();
        if (tpipe::json::dump(m.model) != tpipe::json::dump(model_json(cfg)))
            throw tpipe::state::incompatible_checkpoint("checkpoint "" + in.path() + "" holds the model " +
                                                        tpipe::json::dump(m.model) + "; this run's is " +
                                                        tpipe::json::dump(model_json(cfg)));
        for (std::size_t i = 0; i < pipe.size(); ++i) tpipe::libtorch::load_stage(in, pipe.stage(i), opt);
        data.seek(m.rng.at("data_sampler").as_string("data_sampler"));
        // The library checked step (an integer >= 0); this trainer counts steps in an int.
        return tpipe::checked_narrow<int>("the checkpoint's step", m.step, 0, std::numeric_limits<int>::max() - 1);
    }

private:
    //! The run a --resume continues (its saves carry the same identity); "": a new run.
    static std::string resumed_run(const options& o)
    {
        if (o.resume.empty()) return {};
        using tpipe::state::checkpoint_directory;
        return checkpoint_directory::run_of(checkpoint_directory::resolve(o.resume)).value_or("");
    }

    const options& o_;
    std::optional<tpipe::state::checkpoint_writer> out_;
};

//! What every transport needs: the model, its optimizer and the data, as a trainer has them.
//! `builds` (none: all) names the modules this process holds; the optimizer steps those only.
//! Split over tensor groups (`tensor_of(m)`: the group of module m's stage), this rank's shares
//! of them; `tensor` is the group of its last stage (the loss's).
struct trainer {
    config cfg;
    tpipe::libtorch::tensor_group tensor;
    torch::nn::Sequential model{nullptr};
    std::unique_ptr<torch::optim::AdamW> optimizer;
    corpus data;

    explicit trainer(const options& o, const std::function<bool(std::size_t)>& builds = {},
                     const std::function<tpipe::libtorch::tensor_group(std::size_t)>& tensor_of = {})
        : cfg(config_of(o)), data(o.data, o.seed)
    {
        if (o.threads > 0) torch::set_num_threads(o.threads);
        if (tensor_of) tensor = tensor_of(static_cast<std::size_t>(cfg.layers) + 1);
        model = make_gpt(cfg, o.seed, builds, tensor_of);
        optimizer = std::make_unique<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(o.lr));
    }
};

// [snippet:plain-step]
//! One training step of plain libtorch.
double plain_step(torch::nn::Sequential& model, torch::optim::Optimizer& optimizer, const torch::Tensor& inputs,
                  const torch::Tensor& targets)
{
    optimizer.zero_grad();
    auto logits = model->forward(inputs);
    auto loss = F::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    loss.backward();
    optimizer.step();
    return loss.item<double>();
}
// [/snippet]

//! The last stage's logits of one unit -> the gradient of the batch's mean loss; adds the unit's
//! share of the loss to `loss_sum`. Over a tensor group the logits are this rank's vocabulary
//! share, and every rank gets the whole loss.
torch::Tensor loss_gradient(const tpipe::unit& u, torch::Tensor logits, const torch::Tensor& targets,
                            const tpipe::libtorch::tensor_group& tensor, double& loss_sum)
{
    // [snippet:loss]
    auto y = logits.requires_grad_();  // a leaf: y.grad() is what the last stage's backward gets
    auto t = targets.slice(0, u.row_begin, u.row_end).slice(1, u.token_begin, u.token_end);
    // F::cross_entropy(..., kSum) at one tensor rank; the full logits are never gathered at more
    auto loss = tpipe::libtorch::vocab_parallel_cross_entropy(y, t, tensor, at::Reduction::Sum) /
                static_cast<double>(targets.numel());  // this unit's share of the batch mean
    loss.backward();
    loss_sum += loss.item<double>();
    return y.grad();
    // [/snippet]
}

//! Where a process of an MPI job stands in its pipeline (over threads: the defaults).
struct placement {
    int rank = 0;                           //!< its pipeline rank
    std::function<void(double&)> sum_loss;  //!< sums a step's loss over its pipeline's processes
    bool speaks = true;                     //!< this process reports (process 0)
};

//! `over`: this process's transport (null: threads). One runner type for both.
result pipelined(const options& o, trainer& tr, tpipe::link_transport* over, const placement& where = {})
{
    const int rank = where.rank;
    const tpipe::scheme units = tpipe::scheme_from_spec(o.slicer, tpipe::batch_shape{o.batch, o.seq_len});
    // [snippet:pipeline]
    // A schedule's program for o.stages ranks, and the model cut into its stages: modules
    // [cuts[i], cuts[i+1]) on stage i (interleaved and zb-v place two stages on each rank).
    const tpipe::program prog = tpipe::make_schedule(o.schedule).program(tpipe::topology{.ranks = o.stages}, units);
    const auto cuts = model_cuts(o, prog);
    tpipe::uniform_pipeline<tpipe::libtorch::module_stage> pipe(tpipe::libtorch::cut(tr.model, cuts));
    // Under MPI this process runs one rank. Tensor ranks on threads block in their group's sums:
    // a loop per rank, so that none holds a loop another rank needs (docs/runtime.md).
    tpipe::cpu_engine engine(over ? 1 : o.stages, {.threads = !over && tr.tensor.size() > 1 ? o.stages : 0});
    // [/snippet]
    if (o.check_slicing) {  // token slices of the first unit against it unsliced, stage by stage
        const tpipe::unit u = units.at(0, 0);
        std::vector<std::int64_t> lengths;
        for (int k = 0; k < units.slices(0); ++k) lengths.push_back(units.at(0, k).tokens());
        auto ids = torch::arange(u.rows() * o.seq_len, torch::kLong).remainder(tr.cfg.vocab).view({u.rows(), o.seq_len});
        tpipe::libtorch::check_token_slicing(pipe, ids, lengths);
    }
    using pipe_t = decltype(pipe);
    using runner_t = tpipe::runner<pipe_t, tpipe::cpu_engine>;
    const bool local = over == nullptr;
    if (!local)  // this process holds its own stages only (make_gpt built placeholders for the rest)
        for (std::size_t i = 0; i < pipe.size(); ++i)
            if (prog.stage_rank[i] != rank)
                pipe.stage(i) = tpipe::libtorch::module_stage::elsewhere(pipe.stage(i).name());
    std::unique_ptr<runner_t> runner;
    tpipe::run_options opts;
    opts.watchdog = std::chrono::seconds(o.watchdog);
    opts.trace = !o.trace.empty();
    opts.on_stuck = [](const std::string& report) {  // a stage that never returns: this process cannot go on
        std::fprintf(stderr, "train_libtorch_gpt: %s\n", report.c_str());
        std::_Exit(1);
    };
    runner = local ? std::make_unique<runner_t>(pipe, prog, engine, opts) : std::make_unique<runner_t>(pipe, prog, engine, *over, opts);

    result r;
    if (!o.resume.empty()) {
        r.first_step = checkpoints::resume(o, pipe, *tr.optimizer, tr.data, tr.cfg) + 1;
        if (r.first_step > o.steps)
            throw tpipe::invalid_argument("--resume: the checkpoint is at step " + std::to_string(r.first_step - 1) +
                                          "; give --steps above it to train on");
    }
    std::function<void()> barrier;  // of the processes that save together
    std::vector<int> mine;          // the stages whose shards this process writes
#ifdef TPIPE_LIBTORCH_GPT_MPI
    std::optional<tpipe::mpi::communicator> world;
#endif
    if (local) {
        for (int i = 0; i < prog.stages(); ++i) mine.push_back(i);
    } else {
        mine = stages_on(prog, rank);
#ifdef TPIPE_LIBTORCH_GPT_MPI
        world.emplace(tpipe::mpi::communicator::world());
        barrier = [&world] {
            tpipe::sync_wait([](tpipe::mpi::communicator& c) -> tpipe::task<void> { co_await c.barrier(); }(*world));
        };
#endif
    }
    checkpoints saves(o, prog.stages(), barrier, mine.front() == 0);
    auto t0 = std::chrono::steady_clock::now();
    tpipe::run_stats last;
    for (int step = r.first_step - 1; step < o.steps; ++step) {
        if (step == r.first_step) t0 = std::chrono::steady_clock::now();  // the first step warms up
        auto [inputs, targets] = tr.data.batch(o.batch, o.seq_len);
        // [snippet:step]
        double loss = 0;
        tpipe::io_for<pipe_t> io;
        io.source = [&](const tpipe::unit& u) {  // the first stage's input: this unit's token ids
            return inputs.slice(0, u.row_begin, u.row_end).slice(1, u.token_begin, u.token_end);
        };
        io.output_grad = [&](const tpipe::unit& u, torch::Tensor&& logits) {
            return loss_gradient(u, std::move(logits), targets, tr.tensor, loss);
        };
        tr.optimizer->zero_grad();
        last = runner->run(io);  // forward and backward of every unit: the parameters' .grad() are the batch's
                                 // (last: the step's statistics, for --trace)
        // [/snippet]
        tpipe::libtorch::sum_tied_gradients(pipe);  // (the GPT's head is untied: nothing to add)
        // Each process holds and steps its own stage's parameters; only the last stage knows the
        // loss, which is summed over the pipeline's processes (no gradient crosses: nothing is
        // replicated; each tensor rank of the last stage has the whole loss).
        if (!local) where.sum_loss(loss);
        tr.optimizer->step();
        r.losses.push_back(loss);
        saves.after_step(step + 1, pipe, mine, *tr.optimizer, tr.data, tr.cfg);
    }
    saves.finish();
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!o.trace.empty()) {  // this process's ranks; each process writes its own file
        std::string path = o.trace;
#ifdef TPIPE_LIBTORCH_GPT_MPI
        if (world) path += ".process" + std::to_string(world->rank());
#endif
        tpipe::write_file(path, last.trace("train_libtorch_gpt last step"), "trace file");
    }
    r.speaks = where.speaks;
    return r;
}

//! The parameters of modules [begin, end) of `model` whole, flattened in model order.
//! Collective over the tensor group (its ranks hold shares).
std::vector<double> whole_weights(torch::nn::Sequential& model, std::size_t begin, std::size_t end)
{
    std::vector<double> out;
    for (std::size_t m = begin; m < end; ++m) {
        const std::vector<double> w = flatten(tpipe::libtorch::whole_parameters(*model->ptr(m)));
        out.insert(out.end(), w.begin(), w.end());
    }
    return out;
}

//! --tp T on threads: T pipelines, one per tensor rank, each with a loop per stage rank; the
//! split layers of each stage rank sum over a thread group of its own (stage ranks run at once).
//! Every rank's trainer is built on this thread first: make_gpt draws from libtorch's one
//! global generator. Returns tensor rank 0's run, with the whole model's weights.
result tensor_parallel_on_threads(const options& o)
{
    const auto t = static_cast<std::size_t>(o.tp);
    const tpipe::scheme units = tpipe::scheme_from_spec(o.slicer, tpipe::batch_shape{o.batch, o.seq_len});
    const tpipe::program prog = tpipe::make_schedule(o.schedule).program(tpipe::topology{.ranks = o.stages}, units);
    const auto cuts = model_cuts(o, prog);
    std::vector<tpipe::thread_group> groups;  // one per stage rank
    for (int r = 0; r < o.stages; ++r) groups.emplace_back(o.tp);
    std::vector<tpipe::thread_communicator> members;
    members.reserve(t * static_cast<std::size_t>(o.stages));  // each blocking_group holds its member by reference
    std::vector<std::unique_ptr<tpipe::blocking_group<tpipe::thread_communicator>>> sums;  // [k][r]
    std::vector<std::unique_ptr<trainer>> ranks;
    for (int k = 0; k < o.tp; ++k) {
        for (auto& g : groups) {
            members.push_back(g.member(k));
            sums.push_back(std::make_unique<tpipe::blocking_group<tpipe::thread_communicator>>(members.back()));
        }
        ranks.push_back(std::make_unique<trainer>(o, nullptr, [&](std::size_t m) {
            int s = 0;
            while (m >= cuts[static_cast<std::size_t>(s) + 1]) ++s;
            const int r = prog.stage_rank[static_cast<std::size_t>(s)];
            return tpipe::libtorch::tensor_group(*sums[static_cast<std::size_t>(k * o.stages + r)]);
        }));
    }
    std::vector<result> results(t);
    std::atomic<int> failed_rank{-1};
    try {
        tpipe::on_threads(
            t,
            [&](std::size_t k) {
                try {
                    results[k] = pipelined(o, *ranks[k], nullptr);
                    results[k].weights = whole_weights(ranks[k]->model, 0, ranks[k]->model->size());
                } catch (...) {
                    int none = -1;
                    failed_rank.compare_exchange_strong(none, static_cast<int>(k));
                    throw;
                }
            },
            [&] {  // the others wait in their groups' sums for the failed rank: end their waits
                for (auto& g : groups) g.cancel();
            });
    } catch (const std::exception& e) {
        if (failed_rank.load() < 0) throw;
        throw tpipe::error("tensor rank " + std::to_string(failed_rank.load()) + " of " + std::to_string(o.tp) +
                           " failed (the others were cancelled): " + e.what());
    }
    return results[0];
}

#ifdef TPIPE_LIBTORCH_GPT_MPI

//! checksum_of() every stage's parameters concatenated in stage order (= the model's module
//! order), on process 0, which receives one stage at a time from the process that holds it
//! (`owner(s)`).
std::string checksum_over_processes(tpipe::mpi::communicator& world, const tpipe::program& prog,
                                    const std::function<std::vector<double>(int)>& weights_of,
                                    const std::function<int(int)>& owner_of)
{
    using tpipe::task;
    tpipe::state::checksum sum(tpipe::state::checksum_kind::fnv1a64);  // as checksum_of
    for (int s = 0; s < prog.stages(); ++s) {
        const int owner = owner_of(s);
        if (owner == world.rank() && owner == 0) {
            sum.update(std::as_bytes(std::span<const double>(weights_of(s))));
        } else if (owner == world.rank()) {
            const std::vector<double> mine = weights_of(s);
            const auto count = static_cast<std::int64_t>(mine.size());
            tpipe::sync_wait([](tpipe::mpi::communicator& c, const std::int64_t& n, const std::vector<double>& w) -> task<void> {
                co_await c.send(0, 0, std::as_bytes(std::span<const std::int64_t>(&n, 1)));
                co_await c.send(0, 1, std::as_bytes(std::span(w)));
            }(world, count, mine));
        } else if (world.rank() == 0) {
            std::int64_t n = 0;
            std::vector<double> theirs;
            tpipe::sync_wait([](tpipe::mpi::communicator& c, int from, std::int64_t& n, std::vector<double>& w) -> task<void> {
                co_await c.recv(from, 0, std::as_writable_bytes(std::span<std::int64_t>(&n, 1)));
                w.resize(static_cast<std::size_t>(n));
                co_await c.recv(from, 1, std::as_writable_bytes(std::span(w)));
            }(world, owner, n, theirs));
            sum.update(std::as_bytes(std::span<const double>(theirs)));
        }
    }
    return world.rank() == 0 ? sum.hex() : std::string{};
}

//! Every stage's parameters, flattened, concatenated in stage order, on every process: the
//! process that holds each stage (`owner(s)`) broadcasts it in turn.
std::vector<double> gather_weights(tpipe::mpi::communicator& world, const tpipe::program& prog,
                                   const std::function<std::vector<double>(int)>& weights_of,
                                   const std::function<int(int)>& owner_of)
{
    using tpipe::task;
    std::vector<double> all;
    for (int s = 0; s < prog.stages(); ++s) {
        const int owner = owner_of(s);
        std::vector<double> part = owner == world.rank() ? weights_of(s) : std::vector<double>{};
        auto n = static_cast<std::int64_t>(part.size());
        tpipe::sync_wait([](tpipe::mpi::communicator& c, std::int64_t& n, int root) -> task<void> {
            co_await c.broadcast(std::as_writable_bytes(std::span<std::int64_t>(&n, 1)), root);
        }(world, n, owner));
        part.resize(static_cast<std::size_t>(n));
        tpipe::sync_wait([](tpipe::mpi::communicator& c, std::span<std::byte> b, int root) -> task<void> {
            co_await c.broadcast(b, root);
        }(world, std::as_writable_bytes(std::span(part)), owner));
        all.insert(all.end(), part.begin(), part.end());
    }
    return all;
}
#endif

//! The run's losses, time and final weights (tokens/s left to train()).
result run(const options& o)
{
    result r;
    if (o.transport == "mpi") {
#ifdef TPIPE_LIBTORCH_GPT_MPI
        // The layout, the transport, the communicators: o.tp x o.stages processes.
        tpipe::mpi::job job({.tensor_ranks = o.tp, .pipeline_ranks = o.stages}, MPI_COMM_WORLD,
                            tpipe_examples::link_maker_of(o.link));
        job.set_watchdog(std::chrono::seconds(o.watchdog));  // a stopped process ends the job, named
        if (job.single_process()) {  // a process per stage and tensor rank, in the flags' words
            const std::string tp = o.tp > 1 ? " --tp " + std::to_string(o.tp) : "";
            throw tpipe::invalid_argument("--transport mpi with --stages " + std::to_string(o.stages) + tp + " needs " +
                                          std::to_string(o.stages * o.tp) +
                                          " processes, but the job has 1; launch it with mpirun -np " +
                                          std::to_string(o.stages * o.tp));
        }
        const tpipe::scheme units = tpipe::scheme_from_spec(o.slicer, tpipe::batch_shape{o.batch, o.seq_len});
        const tpipe::program prog = tpipe::make_schedule(o.schedule).program(tpipe::topology{.ranks = o.stages}, units);
        const auto cuts = model_cuts(o, prog);
        const int rank = job.where().rank;
        const std::vector<int> mine = stages_on(prog, rank);
        // A stage's split layers sum over its tensor group, blocking inside the stage's forward
        // and backward (one process per tensor rank: each has its own loop).
        tpipe::blocking_group<tpipe::mpi::communicator> tensor_sums(job.tensor());
        trainer tr(
            o,
            [&](std::size_t m) {  // its stages only
                for (int s : mine)
                    if (m >= cuts[static_cast<std::size_t>(s)] && m < cuts[static_cast<std::size_t>(s) + 1]) return true;
                return false;
            },
            [&](std::size_t) { return tpipe::libtorch::tensor_group(tensor_sums); });
        placement where{.rank = rank,
                        .sum_loss = [&job](double& loss) {
                            tpipe::sync_wait([](tpipe::mpi::communicator& c, double& v) -> tpipe::task<void> {
                                co_await c.all_reduce_sum(std::span<double>(&v, 1));
                            }(job.pipeline(), loss));
                        },
                        .speaks = job.process() == 0};
        r = pipelined(o, tr, &job.transport(), where);
        std::map<int, std::vector<double>> held;  // its stages whole, gathered over the tensor group
        for (int s : mine) held[s] = whole_weights(tr.model, cuts[static_cast<std::size_t>(s)], cuts[static_cast<std::size_t>(s) + 1]);
        auto weights_of = [&](int s) { return held.at(s); };
        auto owner_of = [&](int s) { return job.layout().process_of(0, prog.stage_rank[static_cast<std::size_t>(s)], 0); };
        auto& world = job.all();
        if (o.keep_weights) {  // every process gets the whole model: its checksum is at hand
            r.weights = gather_weights(world, prog, weights_of, owner_of);
            r.weights_fnv = checksum_of(r.weights);
        } else {
            r.weights_fnv = checksum_over_processes(world, prog, weights_of, owner_of);
        }
#else
        throw tpipe::invalid_argument("--transport mpi: built without MPI (configure with -DTPIPE_ENABLE_MPI=ON)");
#endif
        return r;
    }
    if (o.transport == "threads" && o.tp > 1) {
        r = tensor_parallel_on_threads(o);
        r.weights_fnv = checksum_of(r.weights);
        if (!o.keep_weights) r.weights = {};
        return r;
    }
    trainer tr(o);
    if (o.transport == "none") {
        auto t0 = std::chrono::steady_clock::now();
        for (int step = 0; step < o.steps; ++step) {
            if (step == 1) t0 = std::chrono::steady_clock::now();  // the first step warms up
            auto [inputs, targets] = tr.data.batch(o.batch, o.seq_len);
            r.losses.push_back(plain_step(tr.model, *tr.optimizer, inputs, targets));
        }
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else if (o.transport == "threads") {
        r = pipelined(o, tr, nullptr);
    } else {
        throw tpipe::invalid_argument("unknown transport '" + o.transport + "'; use none, threads or mpi");
    }
    r.weights = flatten(*tr.model);
    r.weights_fnv = checksum_of(r.weights);
    if (!o.keep_weights) r.weights = {};
    return r;
}

} // namespace

result train(const options& o)
{
    result r = run(o);
    const int timed = o.steps - r.first_step;  // steps after the first one run
    r.tokens_per_s = double(o.batch) * double(o.seq_len) * std::max(1, timed) / r.seconds;
    return r;
}

} // namespace libtorch_gpt
