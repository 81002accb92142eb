// train_gpt --elastic: elastic pipelined training (PipeTransformer) on CPU threads, or one
// device per MPI process (--transport mpi). Prints each interval's plan and throughput.
#include "elastic_command.hpp"

#include "../common/launch.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include <tpipe/core/flag_reader.hpp>  // usage_error: exit status 2
#include <tpipe/core/json.hpp>

#include <tpipe/elastic/driver_loop.hpp>

#include "gpt/elastic_gpt.hpp"
#include "gpt/fingerprint.hpp"
#include "gpt/frozen.hpp"

#ifdef TPIPE_GPT_MPI
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/exec/sync_wait.hpp>
#include <tpipe/exec/world.hpp>
#include <tpipe/mpi/communicator.hpp>
#include <tpipe/mpi/error.hpp>
#include <tpipe/mpi/transport.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "gpt/pipeline.hpp"
#endif

namespace {

std::string cuts_text(const std::vector<int>& c)
{
    std::ostringstream s;
    for (std::size_t i = 0; i < c.size(); ++i) s << (i ? "," : "") << c[i];
    return s.str();
}

//! The GPT's layer cuts of a driver's stage cuts (over layers and the tail).
std::vector<int> layer_cuts_of(const std::vector<int>& stage_cuts, int layers)
{
    std::vector<int> c(stage_cuts.begin(), stage_cuts.end() - 1);
    c.push_back(layers);
    return c;
}

std::string slices_text(const tpipe::replan_record& r)
{
    std::ostringstream s;
    for (std::size_t m = 0; m < r.slices.size(); ++m) {
        s << (m ? " | " : "") << r.slices[m].rows << " row(s) x ";
        for (std::size_t i = 0; i < r.slices[m].tokens.size(); ++i) s << (i ? "," : "") << r.slices[m].tokens[i];
    }
    return s.str();
}

void print_interval(const gpt::interval_report& r, const gpt::elastic_command& c)
{
    const auto layer_cuts = layer_cuts_of(r.stage_cuts, c.cfg.layers);
    if (c.json) {
        tpipe::json::object o = r.plan.to_json().as_object("replan");
        tpipe::json::array cuts;
        for (int x : layer_cuts) cuts.emplace_back(x);
        o["first_step"] = r.first_step;
        o["steps"] = r.steps;
        o["layer_cuts"] = std::move(cuts);
        o["seconds"] = r.seconds;
        o["replan_s"] = r.replan_seconds;
        o["loss"] = r.mean_loss;
        o["rows_computed"] = r.rows_computed;
        o["rows_extended"] = r.rows_extended;
        o["rows_cached"] = r.rows_cached;
        o["cache_host_bytes"] = static_cast<std::int64_t>(r.cache.host_bytes);
        o["cache_disk_bytes"] = static_cast<std::int64_t>(r.cache.disk_bytes);
        std::cout << tpipe::json::dump(tpipe::json::value(std::move(o))) << std::endl;
        return;
    }
    std::cout << "interval " << r.plan.epoch << " (steps " << r.first_step << "-" << r.first_step + r.steps - 1
              << "): frozen " << r.plan.frozen << "/" << c.cfg.layers << ", " << r.plan.stages << " stage(s) x "
              << r.plan.replicas << " replica(s), " << r.plan.microbatches << " microbatch(es), layer cuts "
              << cuts_text(layer_cuts) << "; " << static_cast<long long>(*r.plan.measured_throughput + 0.5)
              << " samples/s (predicted " << static_cast<long long>(r.plan.predicted_throughput + 0.5) << "), loss "
              << r.mean_loss << ", re-plan " << r.replan_seconds * 1e3 << " ms";
    if (!r.plan.slices.empty()) std::cout << "; token slices " << slices_text(r.plan);
    if (r.plan.frozen > 0)
        std::cout << "; frozen rows: " << r.rows_computed << " computed, " << r.rows_extended << " extended, "
                  << r.rows_cached << " cached";
    std::cout << std::endl;
}

//! The run as a tpipe-plan elastic model (docs/elastic.md), from the measured unit times: one
//! JSON line {"planner_model": {...}}, so that the plan's prediction can be set beside the run.
void print_planner_model(const gpt::config& cfg, const gpt::window_dataset& data, const gpt::elastic_options& o)
{
    const gpt::layout lay(cfg);
    tpipe::json::array units;
    units.emplace_back(tpipe::json::object{{"name", "embedding"}, {"params", static_cast<double>(lay.blocks.front().begin)},
                                           {"block", 0}, {"forward_seconds", 0.0}});
    double f = 0, b = 0;
    for (int l = 0; l <= cfg.layers; ++l) {
        const auto k = static_cast<std::size_t>(l);
        const double params = l < cfg.layers ? static_cast<double>(lay.blocks[k].end - lay.blocks[k].begin)
                                             : static_cast<double>(lay.total - lay.lnf_g);
        units.emplace_back(tpipe::json::object{{"name", l < cfg.layers ? "h." + std::to_string(l) : std::string("head")},
                                               {"params", params}, {"block", l}, {"forward_seconds", o.measured.forward[k]}});
        if (l < cfg.layers) f += o.measured.forward[k], b += o.measured.backward[k];
    }
    tpipe::json::object m{{"name", "gpt-elastic"},
                          {"layers", cfg.layers},
                          {"units", std::move(units)},
                          {"samples_per_epoch", data.samples()},
                          {"batch", o.batch},
                          {"activation_bytes", static_cast<double>(cfg.seq_len) * cfg.d_model * 4},
                          {"backward_factor", b / f}};
    std::cout << tpipe::json::dump(tpipe::json::value(tpipe::json::object{{"planner_model", std::move(m)}})) << std::endl;
}

#ifdef TPIPE_GPT_MPI
//! The MPI backend of tpipe::elastic::run_intervals (the GPT's own: its optimizer step is replicated): process p is one device. In a shape of K stages x D
//! replicas it runs pipeline rank p % K of replica p / K. Every re-plan re-forms the transport
//! (the new world), the communicator of the replica's pipeline ranks and that of the rank's
//! replicas. The optimizer step is replicated, as in train_gpt --transport mpi: gradients are
//! summed over the pipeline ranks and every process steps the whole model, so every process
//! holds the weights and the optimizer state; a re-plan broadcasts process 0's to all anyway
//! (the new replicas' hand-over), and checks nothing changed. The processes' caches share one
//! directory, so a sample's cached output is found by whichever replica draws it next. Without
//! AutoDP a plan uses fewer processes than the job has: the others idle until the next plan.
class mpi_backend {
public:
    mpi_backend(const gpt::config& cfg, const gpt::window_dataset& data, const gpt::elastic_options& o, int threads)
        : cfg_(cfg), data_(data), o_(o), threads_(threads), params_(cfg),
          opt_((params_.init(o.seed), params_), o.opt), sampler_({.samples = data.samples(), .batch = o.batch, .seed = o.seed}),
          world_(tpipe::mpi::communicator::world())
    {
        me_ = world_.rank();
        if (o.autocache) {  // one directory for the processes' caches (one machine), made by process 0
            std::string dir(4096, '\0');
            if (me_ == 0) {
                std::string templ = (std::filesystem::temp_directory_path() / "tpipe-elastic-cache-XXXXXX").string();
                if (!::mkdtemp(templ.data())) throw std::runtime_error("cannot create a cache directory in " + templ);
                std::copy(templ.begin(), templ.end(), dir.begin());
            }
            tpipe::mpi::check(MPI_Bcast(dir.data(), static_cast<int>(dir.size()), MPI_CHAR, 0, world_.native()), "MPI_Bcast");
            shared_dir_ = dir.c_str();
            cache_ = std::make_unique<gpt::frozen_prefix<float>::cache_type>(
                tpipe::elastic::cache_options{.host_bytes = o.cache_bytes, .shared_directory = shared_dir_});
        }
    }
    ~mpi_backend()
    {
        tear_down();
        cache_.reset();
        if (!shared_dir_.empty()) {
            MPI_Barrier(world_.native());  // every process is done with the shared entries
            std::error_code ec;
            if (me_ == 0) std::filesystem::remove_all(shared_dir_, ec);
        }
    }

    bool reshape(const tpipe::elastic::interval_shape& next)
    {
        const std::vector<float> before = params_.value;
        const std::int64_t t_before = opt_.step_count();
        const std::vector<float> m_before(opt_.first_moments().begin(), opt_.first_moments().end());
        const std::int64_t frozen_from = opt_.frozen();
        tear_down();
        opt_.freeze(params_.lay.frozen_end(next.frozen));
        tpipe::sync_wait(receive_state());  // AutoDP's hand-over: process 0's state to everyone
        const auto drop = static_cast<std::ptrdiff_t>(opt_.frozen() - frozen_from);
        // A process that idled (no AutoDP) held a stale state, which the broadcast replaced.
        const bool kept = !active_now_ || (params_.value == before && opt_.step_count() == t_before &&
                                           std::equal(opt_.first_moments().begin(), opt_.first_moments().end(),
                                                      m_before.begin() + drop));
        shape_ = next;
        const int K = shape_.stages, D = shape_.replicas;
        if (K * D > world_.size())
            throw std::invalid_argument("elastic training under MPI needs one process per device: the plan has " +
                                        std::to_string(K * D) + " devices, the job " + std::to_string(world_.size()));
        // The processes of this plan (without AutoDP, the freed ones idle until the next plan).
        const bool agreed = all_agree(kept, world_);
        active_now_ = me_ < K * D;
        MPI_Comm active = MPI_COMM_NULL;
        tpipe::mpi::check(MPI_Comm_split(world_.native(), active_now_ ? 0 : MPI_UNDEFINED, me_, &active), "MPI_Comm_split");
        if (!active_now_) return agreed;
        active_ = std::make_unique<tpipe::mpi::communicator>(active);
        MPI_Comm_free(&active);
        replica_ = me_ / K;
        rank_ = me_ % K;
        transport_ = std::make_unique<tpipe::mpi::transport>(tpipe::world::one_rank_per_process(K, D), replica_, active_->native());
        pipeline_ = std::make_unique<tpipe::mpi::communicator>(active_->split(replica_, rank_));
        replicas_ = std::make_unique<tpipe::mpi::communicator>(active_->split(rank_, replica_));
        replicas_->set_reduction_order(tpipe::reduction_order::rank_order);  // as on threads: independent of the cuts
        std::vector<bool> here(static_cast<std::size_t>(K), false);
        here[static_cast<std::size_t>(rank_)] = true;
        model_ = std::make_unique<gpt::pipelined_model<float>>(params_, K, threads_, layer_cuts_of(shape_.stage_cuts, cfg_.layers), here);
        if (shape_.frozen > 0) {
            if (rank_ == 0) prefix_ = std::make_unique<gpt::frozen_prefix<float>>(params_, threads_, cache_.get());
            model_->set_source([this](const tpipe::unit& u) { return gpt::unit_slice(frozen_out_, u, cfg_.d_model); });
        }
        const auto prog = tpipe::make_schedule(tpipe::elastic::schedule_for(shape_.units)).program(tpipe::topology{.ranks = K}, shape_.units);
        tpipe::run_options opts;
        if (D > 1) {
            std::vector<tpipe::mpi::communicator*> comms(static_cast<std::size_t>(K), nullptr);
            comms[static_cast<std::size_t>(rank_)] = replicas_.get();
            dp_ = std::make_unique<tpipe::data_parallel<tpipe::mpi::communicator>>(model_->pipe(), comms);
            opts.after_backward = dp_->hook();
        }
        runner_ = std::make_unique<runner_t>(model_->pipe(), prog, engine_, *transport_, opts);
        return agreed;
    }

    double step(std::int64_t step)
    {
        if (!active_now_) return 0;
        const auto ids = sampler_.shard(step, replica_, shape_.replicas);
        const gpt::batch b = data_.rows(ids);
        if (prefix_) frozen_out_ = prefix_->forward(b, ids, shape_.frozen);
        model_->begin_step(b);
        runner_->run(model_->io());
        const double mine = model_->finish_step();
        // Each rank holds its stages' gradients and zeros elsewhere: the sum is exact. Only the
        // active parameters: frozen gradients are zero everywhere.
        if (pipeline_->size() > 1) {
            const std::int64_t from = opt_.frozen();
            tpipe::mpi::check(MPI_Allreduce(MPI_IN_PLACE, params_.grad.data() + from, static_cast<int>(params_.size() - from),
                                            MPI_FLOAT, MPI_SUM, pipeline_->native()),
                              "MPI_Allreduce (gradients over the pipeline ranks)");
        }
        double sum = 0;
        tpipe::mpi::check(MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, active_->native()), "MPI_Allreduce (loss)");
        opt_.step(params_);
        return sum / shape_.replicas;
    }

    //! Among the processes of the current plan (an idle one's weights are stale by design).
    bool replicas_identical()
    {
        if (!active_now_) return true;
        std::string mine = gpt::fnv_hex(params_.value), first = mine;
        tpipe::mpi::check(MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_CHAR, 0, active_->native()), "MPI_Bcast");
        return all_agree(mine == first, *active_);
    }

    tpipe::elastic::frozen_counters frozen_rows()
    {
        auto c = retired_;
        if (prefix_) c += prefix_->count();
        if (!active_now_) return c;
        std::int64_t v[3] = {c.full, c.extended, c.cached};
        tpipe::mpi::check(MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_INT64_T, MPI_SUM, active_->native()), "MPI_Allreduce");
        return {v[0], v[1], v[2]};
    }
    tpipe::elastic::cache_stats cache_stats() const { return cache_ ? cache_->stats() : tpipe::elastic::cache_stats{}; }
    std::vector<float> weights() const { return params_.value; }
    int process() const { return me_; }
    //! The whole model's state: every process holds it (the optimizer step is replicated).
    gpt::parameters<float>& params() { return params_; }
    gpt::adamw<float>& optimizer() { return opt_; }

private:
    using runner_t = tpipe::runner<tpipe::uniform_pipeline<gpt::stage<float>>, tpipe::cpu_engine, tpipe::mpi::transport>;

    tpipe::task<void> receive_state()
    {
        co_await world_.broadcast(std::as_writable_bytes(std::span<float>(params_.value)), 0);
        co_await world_.broadcast(std::as_writable_bytes(opt_.first_moments()), 0);
        co_await world_.broadcast(std::as_writable_bytes(opt_.second_moments()), 0);
        co_await world_.broadcast(std::as_writable_bytes(std::span<std::int64_t>(&opt_.step_count(), 1)), 0);
    }

    static bool all_agree(bool mine, const tpipe::mpi::communicator& c)
    {
        int ok = mine ? 1 : 0, all = 0;
        tpipe::mpi::check(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, c.native()), "MPI_Allreduce");
        return all == 1;
    }

    void tear_down()
    {
        if (prefix_) retired_ += prefix_->count();
        runner_.reset();
        dp_.reset();
        model_.reset();
        prefix_.reset();
        replicas_.reset();
        pipeline_.reset();
        transport_.reset();
        active_.reset();
    }

    const gpt::config& cfg_;
    const gpt::window_dataset& data_;
    const gpt::elastic_options& o_;
    int threads_;
    gpt::parameters<float> params_;
    gpt::adamw<float> opt_;
    tpipe::elastic::epoch_sampler sampler_;
    tpipe::mpi::communicator world_;
    int me_ = 0, replica_ = 0, rank_ = 0;
    bool active_now_ = true;  //!< this process runs a rank of the current plan
    tpipe::elastic::interval_shape shape_;
    tpipe::cpu_engine engine_{1};
    std::filesystem::path shared_dir_;
    std::unique_ptr<gpt::frozen_prefix<float>::cache_type> cache_;
    std::unique_ptr<tpipe::mpi::transport> transport_;
    std::unique_ptr<tpipe::mpi::communicator> active_, pipeline_, replicas_;
    std::unique_ptr<gpt::pipelined_model<float>> model_;
    std::unique_ptr<gpt::frozen_prefix<float>> prefix_;
    std::unique_ptr<tpipe::data_parallel<tpipe::mpi::communicator>> dp_;
    std::unique_ptr<runner_t> runner_;
    gpt::activation<float> frozen_out_;
    tpipe::elastic::frozen_counters retired_;
};

//! Process 0's unit times on every process (plans depend on them and must agree).
gpt::unit_seconds shared_unit_times(const gpt::config& cfg, int threads)
{
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    gpt::unit_seconds u;
    std::vector<double> flat(static_cast<std::size_t>(2 * (cfg.layers + 1)));
    if (me == 0) {
        u = gpt::measure_units(cfg, cfg.seq_len, threads);
        std::copy(u.forward.begin(), u.forward.end(), flat.begin());
        std::copy(u.backward.begin(), u.backward.end(), flat.begin() + cfg.layers + 1);
    }
    tpipe::mpi::check(MPI_Bcast(flat.data(), static_cast<int>(flat.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD), "MPI_Bcast (unit times)");
    u.forward.assign(flat.begin(), flat.begin() + cfg.layers + 1);
    u.backward.assign(flat.begin() + cfg.layers + 1, flat.end());
    return u;
}
#endif

//! Whether this process prints: process 0 of an MPI job, or the only one.
bool first_process([[maybe_unused]] const std::string& transport)
{
#ifdef TPIPE_GPT_MPI
    if (transport == "mpi") {
        int me = 0;
        tpipe::mpi::check(MPI_Comm_rank(MPI_COMM_WORLD, &me), "MPI_Comm_rank");
        return me == 0;
    }
#endif
    return true;
}

} // namespace

namespace gpt {

int run_elastic_command(const elastic_command& c, const std::string& text)
{
    const window_dataset data(text, c.cfg.seq_len, c.opts.batch);
    elastic_options o = c.opts;
    const std::int64_t per_epoch = data.samples() / o.batch;
    if (o.steps <= 0) o.steps = c.epochs * per_epoch;
    const int hw = compute_threads(o);
    [[maybe_unused]] const int per_process = std::max(1, o.threads > 0 ? o.threads : hw / o.devices);  // under MPI only
    bool speaks = true;
    elastic_result res;
    // SIGINT/SIGTERM: stop at the next step boundary. Over MPI the processes agree on it at every
    // step (a signal reaches them at different times, or only some of them).
    const tpipe_examples::stop_request stop(true);
    int stop_signal = 0;
    o.stop = [&](std::int64_t) {
        stop_signal = stop.signal();
#ifdef TPIPE_GPT_MPI
        if (c.transport == "mpi")
            tpipe::mpi::check(MPI_Allreduce(MPI_IN_PLACE, &stop_signal, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD),
                              "MPI_Allreduce (stop signal)");
#endif
        return stop_signal != 0;
    };
    auto print = [&](const interval_report& r) {
        if (speaks) print_interval(r, c);
    };
    // Checkpoints: the process of replica 0 holds the whole model and saves it; every process
    // loads it (each holds the whole model).
    std::optional<elastic_checkpointer> saver;
    auto resume = [&](parameters<float>& p, adamw<float>& opt) -> std::optional<tpipe::elastic::resume_point> {
        if (c.ckpt.resume.empty()) return std::nullopt;
        const auto at = load_elastic_checkpoint(c.ckpt.resume, c.cfg, o.opt, p, opt);
        if (speaks && !c.json)
            std::cout << "resumed from step " << at.steps_done << " (" << c.ckpt.resume << "): " << at.plan.frozen
                      << " layer(s) frozen, " << at.plan.stages << " stage(s) x " << at.plan.replicas << " replica(s)\n";
        return at;
    };
    auto after_step = [&](std::int64_t done, const tpipe::replan_record& plan, parameters<float>& p, adamw<float>& opt) {
        saver->after_step(done, plan, p, opt);
    };
    bool stop_saved = false;
    auto after_run = [&](const tpipe::elastic::run_report& r, parameters<float>& p, adamw<float>& opt) {
        if (r.stopped_after >= 0) stop_saved = saver->save_stopped(r.stopped_after, p, opt);
        saver->finish();
    };
    auto header = [&] {
        if (speaks && !c.json)
            std::cout << "elastic: " << c.cfg.layers << " layers, d_model " << c.cfg.d_model << ", " << data.samples()
                      << " samples (" << per_epoch << " steps of " << o.batch << " per epoch), " << o.steps << " steps, "
                      << o.devices << " device(s) over " << c.transport << ", alpha " << o.alpha << ", freeze every "
                      << (o.freeze_every > 0 ? o.freeze_every : per_epoch) << " steps"
                      << (o.autopipe ? "" : ", no AutoPipe") << (o.autodp ? "" : ", no AutoDP")
                      << (o.autocache ? "" : ", no AutoCache") << "\n";
    };
    std::optional<saved_elastic_run> saved;
    if (!c.ckpt.resume.empty()) saved = read_saved_elastic_run(c.ckpt.resume, c.cfg.layers + 1);
    if (saved && saved->steps_done > o.steps)
        throw tpipe::usage_error("--resume " + c.ckpt.resume + ": the checkpoint has trained " +
                                 std::to_string(saved->steps_done) + " steps, more than this run's " +
                                 std::to_string(o.steps) + " (raise --steps or --epochs)");
    if (saved && saved->steps_done == o.steps) {
        // Finished already (a restart loop restarts a job whose last process was killed after its
        // last save): the checkpoint is the result.
        parameters<float> p(c.cfg);
        adamw<float> opt(p, o.opt);
        load_elastic_checkpoint(c.ckpt.resume, c.cfg, o.opt, p, opt);
        res.weights = p.value;
        speaks = first_process(c.transport);
        if (speaks)
            std::cerr << "train_gpt: " << c.ckpt.resume << " has trained all " << o.steps
                      << " steps; nothing is left to train\n";
    } else if (c.transport == "mpi") {
#ifdef TPIPE_GPT_MPI
        int size = 0;
        tpipe::mpi::check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
        if (o.devices != size)
            throw std::invalid_argument("--elastic --transport mpi: --devices " + std::to_string(o.devices) + " but the job has " +
                                        std::to_string(size) + " processes; launch mpirun -np " + std::to_string(o.devices));
        // A resumed run plans with the saved run's unit times (every process reads the same file).
        o.measured = saved ? saved->measured : shared_unit_times(c.cfg, per_process);
        tpipe::elastic::driver_options d = o;
        d.seq_len = c.cfg.seq_len;
        const tpipe::elastic::shape_planner planner(unit_costs(c.cfg), c.cfg.layers, d);
        mpi_backend be(c.cfg, data, o, per_process);
        speaks = be.process() == 0;
        header();
        if (speaks && c.json) print_planner_model(c.cfg, data, o);
        saver.emplace(c.ckpt, c.cfg, o.opt, o.seed, o.measured, be.process() == 0);
        d.after_step = [&](std::int64_t done, const tpipe::replan_record& plan) {
            after_step(done, plan, be.params(), be.optimizer());
        };
        const auto from = resume(be.params(), be.optimizer());
        static_cast<tpipe::elastic::run_report&>(res) = tpipe::elastic::run_intervals(data.samples(), d, planner, be, print, from);
        after_run(res, be.params(), be.optimizer());
        res.weights = be.weights();
#else
        throw std::invalid_argument("--transport mpi: this train_gpt was built without MPI");
#endif
    } else {
        header();
        o.measured = saved ? saved->measured : measure_units(c.cfg, c.cfg.seq_len, std::max(1, hw / o.devices));
        if (c.json) print_planner_model(c.cfg, data, o);
        saver.emplace(c.ckpt, c.cfg, o.opt, o.seed, o.measured, true);
        res = train_elastic(c.cfg, data, o, print, {.resume = resume, .after_step = after_step, .after_run = after_run});
    }
    if (res.stopped_after >= 0) {
        if (speaks || stop.requested())
            std::cerr << "train_gpt: " << stop.stopped_at(stop_signal, res.stopped_after, o.steps)
                      << (stop_saved ? ", saved in " + c.ckpt.save : std::string()) << "\n";
        return 128 + stop_signal;
    }
    if (!speaks) return 0;
    double samples = 0;
    for (const auto& r : res.intervals) samples += static_cast<double>(r.steps * o.batch);
    const double per_s = res.seconds > 0 ? samples / res.seconds : 0;
    tpipe::json::object summary{{"summary", true},
                                {"steps", o.steps},
                                {"seconds", res.seconds},
                                {"samples_per_s", per_s},
                                {"last_loss", res.intervals.empty() ? tpipe::json::value(nullptr)
                                                                    : tpipe::json::value(res.intervals.back().mean_loss)},
                                {"transport", c.transport},
                                {"devices", o.devices},
                                {"replicas_identical", res.replicas_identical},
                                {"replans_kept_weights", res.replans_kept_weights},
                                {"weights_fnv", fnv_hex(res.weights)}};
    int status = res.replicas_identical && res.replans_kept_weights ? 0 : 3;
    if (c.check) {  // the same freezing without pipelines, replicas or a cache: bitwise
        const bool same = train_frozen_reference(c.cfg, data, o, res.intervals) == res.weights;
        summary["check_ok"] = same && status == 0;
        if (!c.json)
            std::cout << "check against the non-elastic run with the same freezing: " << (same ? "bitwise equal" : "DIFFERENT") << "\n";
        if (!same) status = 3;
    }
    if (c.json) std::cout << tpipe::json::dump(tpipe::json::value(std::move(summary))) << "\n";
    else
        std::cout << "elastic run: " << per_s << " samples/s over " << res.seconds << " s; weights "
                  << fnv_hex(res.weights) << (res.replicas_identical ? ", replicas identical" : ", replicas DIFFER")
                  << (res.replans_kept_weights ? ", re-plans kept the weights" : ", a re-plan CHANGED the weights") << "\n";
    return status;
}

} // namespace gpt
