// train_gpt --elastic: elastic pipelined training (PipeTransformer) on CPU threads, or one
// device per MPI process (--transport mpi). Prints each interval's plan and throughput.
#include "elastic_command.hpp"

#include "../common/launch.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "cli/flag_reader.hpp"  // usage_error: exit status 2
#include <tpipe/core/json.hpp>

#include <tpipe/elastic/driver_loop.hpp>
#include <tpipe/elastic/plan_inputs_file.hpp>

#include "gpt/elastic_gpt.hpp"
#include "gpt/fingerprint.hpp"
#include "gpt/frozen.hpp"

#ifdef TPIPE_GPT_MPI
#include "../common/links.hpp"
#include <tpipe/comm/every_member.hpp>
#include <tpipe/async/sync_wait.hpp>
#include <tpipe/exec/fingerprint.hpp>
#include <tpipe/mpi/agree.hpp>
#include <tpipe/mpi/elastic_driver.hpp>
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

//! Seconds as milliseconds with two decimals.
std::string milliseconds(double seconds)
{
    std::ostringstream s;
    s.setf(std::ios::fixed);
    s.precision(2);
    s << seconds * 1e3;
    return s.str();
}

//! The GPT's layer cuts of a driver's stage cuts (over layers and the tail).
std::vector<int> layer_cuts_of(const std::vector<int>& stage_cuts, int layers)
{
    std::vector<int> c(stage_cuts.begin(), stage_cuts.end() - 1);
    c.push_back(layers);
    return c;
}

std::string slices_text(const tpipe::elastic::replan_record& r)
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
        o["step_p10_s"] = r.spread.p10;
        o["step_p90_s"] = r.spread.p90;
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
              << r.mean_loss << ", steps " << milliseconds(r.spread.p10) << "-" << milliseconds(r.spread.p90)
              << " ms (p10-p90), re-plan " << milliseconds(r.replan_seconds) << " ms";
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


//! --plan-from: the recorded unit times (and token tables) instead of measured ones.
void replay_recorded_inputs(const gpt::elastic_command& c, gpt::elastic_options& o)
{
    tpipe::elastic::replay_plan_inputs(c.plan_from, o, static_cast<std::size_t>(c.cfg.layers) + 1, o.terapipe_granularity);
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
#ifdef TPIPE_GPT_MPI
    std::optional<tpipe::mpi::communicator> world;  // the job's processes (--transport mpi)
    if (c.transport == "mpi") world.emplace(tpipe::mpi::communicator::world());
#endif
    const tpipe_examples::stop_request stop(true);
    int stop_signal = 0;
    o.stop = [&](std::int64_t) {
        stop_signal = stop.signal();
#ifdef TPIPE_GPT_MPI
        if (world) {  // the largest: any process's signal stops every process at this step
            const auto all = tpipe::sync_wait(tpipe::every_member(*world, std::int32_t{stop_signal}));
            stop_signal = *std::max_element(all.begin(), all.end());
        }
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
    auto after_step = [&](std::int64_t done, const tpipe::elastic::replan_record& plan, parameters<float>& p, adamw<float>& opt) {
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
#ifdef TPIPE_GPT_MPI
        speaks = !world || world->rank() == 0;
#endif
        if (speaks)
            std::cerr << "train_gpt: " << c.ckpt.resume << " has trained all " << o.steps
                      << " steps; nothing is left to train\n";
    } else if (c.transport == "mpi") {
#ifdef TPIPE_GPT_MPI
        const int size = world->size();
        if (o.devices != size)
            throw std::invalid_argument("--elastic --transport mpi: --devices " + std::to_string(o.devices) + " but the job has " +
                                        std::to_string(size) + " processes; launch mpirun -np " + std::to_string(o.devices));
        // Every process plans with process 0's unit times (and token tables); a resumed run with
        // the saved run's unit times, a replayed one with the recorded inputs (every process
        // reads the same file, so that a bad one is refused on every process).
        // The watchdog bounds every collective from here on, the share included: the others wait
        // on while process 0 measures, for as long as it answers (communicator::busy).
        world->set_watchdog(o.watchdog);
        if (!c.plan_from.empty()) replay_recorded_inputs(c, o);
        else if (saved) o.measured = saved->measured;
        const bool measures = world->rank() == 0 && c.plan_from.empty() && !saved;
        const bool profiles = world->rank() == 0 && o.terapipe_granularity > 0 && !o.slicing;
        if (measures || profiles) {
            const auto busy = world->busy("measuring the layers for the elastic plan");
            if (measures) o.measured = measure_units(c.cfg, c.cfg.seq_len, per_process);
            if (profiles) o.slicing = profile_token_slicing(c.cfg, data, o, per_process);
        }
        tpipe::mpi::share_plan_inputs(*world, o, static_cast<std::size_t>(c.cfg.layers) + 1);
        if (!c.record_plan.empty() && world->rank() == 0) tpipe::elastic::record_plan_inputs(c.record_plan, o);
        tpipe::elastic::driver_options d = o;
        d.seq_len = c.cfg.seq_len;
        elastic_gpt* trained = nullptr;  // the driver's model (every process holds the whole model)
        d.after_step = [&](std::int64_t done, const tpipe::elastic::replan_record& plan) {
            after_step(done, plan, trained->params(), trained->optimizer());
        };
        tpipe::mpi::elastic_driver<elastic_gpt> driver(std::make_unique<elastic_gpt>(c.cfg, data, o.opt, o.seed),
                                                       data.samples(), d, per_process, tpipe::mpi::communicator::world(),
                                                       tpipe_examples::link_maker_of(c.link));
        trained = &driver.model();
        speaks = driver.process() == 0;
        header();
        if (speaks && c.json) print_planner_model(c.cfg, data, o);
        saver.emplace(c.ckpt, c.cfg, o.opt, o.seed, o.measured, driver.process() == 0, saved ? saved->run : "");
        const auto from = resume(trained->params(), trained->optimizer());
        if (from)  // the launch agreed on the flags; the processes must also have read the same checkpoint
            tpipe::mpi::agree(MPI_COMM_WORLD,
                              tpipe::fingerprint()
                                  .add("resumed step", from->steps_done)
                                  .add("resumed checkpoint (manifest)", tpipe_examples::checkpoint_identity(c.ckpt.resume))
                                  .text(),
                              "");
        static_cast<tpipe::elastic::run_report&>(res) = driver.run(print, from);
        after_run(res, trained->params(), trained->optimizer());
        res.weights = trained->params().value;
#else
        throw std::invalid_argument("--transport mpi: this train_gpt was built without MPI");
#endif
    } else {
        header();
        const int per_stage = std::max(1, hw / o.devices);
        if (!c.plan_from.empty()) replay_recorded_inputs(c, o);
        else o.measured = saved ? saved->measured : measure_units(c.cfg, c.cfg.seq_len, per_stage);
        if (o.terapipe_granularity > 0 && !o.slicing) o.slicing = profile_token_slicing(c.cfg, data, o, per_stage);
        if (!c.record_plan.empty()) tpipe::elastic::record_plan_inputs(c.record_plan, o);
        if (c.json) print_planner_model(c.cfg, data, o);
        saver.emplace(c.ckpt, c.cfg, o.opt, o.seed, o.measured, true, saved ? saved->run : "");
        res = train_elastic(c.cfg, data, o, print, {.resume = resume, .after_step = after_step, .after_run = after_run});
    }
    if (res.stopped_after >= 0) {
        if (speaks || stop.requested())
            std::cerr << "train_gpt: " << stop.stopped_at(stop_signal, res.stopped_after, o.steps)
                      << (stop_saved ? ", saved in " + c.ckpt.save : std::string()) << "\n";
        return 128 + stop_signal;
    }
    if (!speaks) return 0;
    double samples = 0, predicted_s = 0;
    for (const auto& r : res.intervals) samples += static_cast<double>(r.steps * o.batch), predicted_s += r.predicted_seconds;
    const double per_s = res.seconds > 0 ? samples / res.seconds : 0;
    const double predicted_per_s = predicted_s > 0 ? samples / predicted_s : 0;  // the intervals' forecasts (re-plans left out)
    tpipe::json::object summary{{"summary", true},
                                {"steps", o.steps},
                                {"seconds", res.seconds},
                                {"samples_per_s", per_s},
                                {"predicted_samples_per_s", predicted_per_s},
                                {"last_loss", res.intervals.empty() ? tpipe::json::value(nullptr)
                                                                    : tpipe::json::value(res.intervals.back().mean_loss)},
                                {"transport", c.transport},
                                {"link", c.transport == "mpi" ? c.link : std::string()},
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
        std::cout << "elastic run: " << per_s << " samples/s (predicted " << static_cast<long long>(predicted_per_s + 0.5)
                  << ") over " << res.seconds << " s; weights "
                  << fnv_hex(res.weights) << (res.replicas_identical ? ", replicas identical" : ", replicas DIFFER")
                  << (res.replans_kept_weights ? ", re-plans kept the weights" : ", a re-plan CHANGED the weights") << "\n";
    return status;
}

} // namespace gpt
