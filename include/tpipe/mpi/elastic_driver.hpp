#pragma once
// tpipe::mpi::elastic_driver: the elastic driver over MPI processes, one process per device. It
// runs tpipe::elastic::run_intervals (freeze -> AutoPipe -> AutoDP -> AutoCache, the same plans
// as tpipe::elastic::thread_driver) for a tpipe::elastic::process_freezable_model:
//
//   tpipe::mpi::elastic_driver<my_model> d(std::make_unique<my_model>(...), samples, options, threads);
//   auto report = d.run(on_interval);      // every process calls it; mpirun -np options.devices
//   d.model();                             // the trained model, on every process
//
// In a plan of K stages x D replicas, process p runs pipeline rank p % K of replica p / K. Every
// re-plan re-forms the transport and two communicators: the replica's pipeline ranks and the
// rank's replicas. The optimizer step is replicated: every process holds the whole model, the
// trainable gradients are summed over the pipeline's processes (each holds its stages' and
// zeros: the sum is exact) and every process steps the whole optimizer. A re-plan broadcasts
// process 0's trainable state to all (the new replicas' hand-over) and checks nothing else
// changed. The data-parallel all-reduce adds in rank order, as the thread driver's does, and the
// mean loss is added replica by replica: the same bits as the thread driver's run.
//
// Plans must agree: the driver refuses to start (on every process, with a sentence) when the
// processes' unit costs, options, unit times or token tables differ; measure on process 0 and
// share them with tpipe::mpi::share_plan_inputs (mpi/plan_inputs.hpp).
//
// AutoCache: one activation_cache per process over one shared directory (made by process 0), so a
// sample's cached prefix output is found by whichever replica draws it next. Without AutoDP a plan
// uses fewer processes than the job has: the others idle until the next plan.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tpipe/comm/every_member.hpp"
#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/elastic/cache.hpp"
#include "tpipe/elastic/driver_loop.hpp"
#include "tpipe/elastic/freezable_model.hpp"
#include "tpipe/elastic/frozen_outputs.hpp"
#include "tpipe/elastic/sampler.hpp"
#include "tpipe/elastic/shape_planner.hpp"
#include "tpipe/exec/data_parallel.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/mpi/plan_inputs.hpp"
#include "tpipe/mpi/transport.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/state/checksum.hpp"

namespace tpipe::mpi {

template <elastic::process_freezable_model M>
class elastic_driver {
public:
    //! `model`: this process's (every process starts from the same weights); `threads`: compute
    //! threads of each stage this process runs. Collective over `world` (every process). Payloads
    //! cross processes over the engine that `links` makes for each plan's transport (over the
    //! plan's processes: tpipe::ucx::links), or over MPI.
    elastic_driver(std::unique_ptr<M> model, std::int64_t samples, elastic::driver_options o, int threads,
                   communicator world = communicator::world(), link_maker links = {})
        : model_(std::move(model)), samples_(samples), o_(std::move(o)), threads_(std::max(1, threads)),
          sampler_({.samples = samples, .batch = o_.batch, .seed = o_.seed}), world_(std::move(world)),
          make_links_(std::move(links))
    {
        me_ = world_.rank();
        // Every collective of the driver (and of the communicators split from world_) is bounded
        // by the watchdog, as its pipelines are: a stopped process is named, and the job ends.
        world_.set_watchdog(o_.watchdog, [this](int p) {
            const int K = shape_.stages, n = K * shape_.replicas;
            return "process " + std::to_string(p) +
                   (p < n ? " (replica " + std::to_string(p / K) + ", rank " + std::to_string(p % K) + ")" : std::string(" (idle)"));
        });
        if (o_.devices != world_.size())
            throw invalid_argument("tpipe::mpi::elastic_driver: " + std::to_string(o_.devices) + " devices, but the job has " +
                                   std::to_string(world_.size()) + " processes; launch mpirun -np " +
                                   std::to_string(o_.devices) + " (one process per device)");
        const auto digests = every_process_value(
            static_cast<std::int64_t>(plan_inputs_digest(model_->unit_costs(), model_->freezable_units(), o_)));
        for (std::size_t p = 1; p < digests.size(); ++p)
            if (digests[p] != digests[0])  // two plans would be a hang: refuse on every process
                throw invalid_argument("tpipe::mpi::elastic_driver: process " + std::to_string(p) +
                                       " plans from other unit costs, options, unit times or token latency tables "
                                       "than process 0; every process must plan alike (measure on process 0 and "
                                       "share: tpipe::mpi::share_plan_inputs)");
        if (o_.autocache) {
            shared_dir_ = shared_directory();
            cache_ = std::make_unique<elastic::activation_cache<out_t>>(
                elastic::cache_options{.host_bytes = o_.cache_bytes, .shared_directory = shared_dir_});
        }
    }
    ~elastic_driver()
    {
        tear_down();
        cache_.reset();
        if (!shared_dir_.empty()) {
            // A stalled job (a watchdog gave up on a process) ends: no barrier to wait out again,
            // and the others may still read the entries.
            bool together = !detail::member_stalled().load(std::memory_order_relaxed);
            try {
                if (together) sync_wait(barrier(world_));  // every process is done with the shared entries
            } catch (const std::exception&) {
                together = false;
            }
            std::error_code ec;
            if (me_ == 0 && together) std::filesystem::remove_all(shared_dir_, ec);
        }
    }
    elastic_driver(const elastic_driver&) = delete;
    elastic_driver& operator=(const elastic_driver&) = delete;

    //! Trains o.steps steps, from the start or, resumed, from `from` (model() must then hold that
    //! step's state on every process); `on_interval` (optional) sees each interval when it ends.
    elastic::run_report run(const std::function<void(const elastic::interval_report&)>& on_interval = {},
                            const std::optional<elastic::resume_point>& from = {})
    {
        const elastic::shape_planner planner(model_->unit_costs(), model_->freezable_units(), o_);
        auto report = elastic::run_intervals(samples_, o_, planner, *this, on_interval, from);
        // Every process ends with the trained model: a process idle in the last plan (no AutoDP)
        // held a stale state. Collective, like every step.
        for (auto s : model_->trainable_state()) sync_wait(broadcast(world_, s));
        return report;
    }

    M& model() { return *model_; }
    int process() const { return me_; }

    // ---- the backend of run_intervals ------------------------------------------------------
    bool reshape(const elastic::interval_shape& next)
    {
        tear_down();
        model_->freeze(next.frozen);
        const auto before = flat_state();
        for (auto s : model_->trainable_state()) sync_wait(broadcast(world_, s));  // AutoDP: process 0's state
        // A process that idled (no AutoDP) held a stale state, which the broadcast replaced.
        const bool kept = !active_ || flat_state() == before;
        const bool agreed = every_process(kept);
        shape_ = next;
        const int K = shape_.stages, D = shape_.replicas;
        if (K * D > world_.size())
            throw invalid_argument("tpipe::mpi::elastic_driver: the plan has " + std::to_string(K * D) +
                                   " devices, the job " + std::to_string(world_.size()) + " processes");
        active_ = me_ < K * D;
        active_comm_ = std::make_unique<communicator>(world_.split(active_ ? 0 : 1, me_));  // idle: a group of their own
        if (!active_) return agreed;
        replica_ = me_ / K;
        rank_ = me_ % K;
        if (make_links_) links_ = make_links_(active_comm_->native());
        transport_ = std::make_unique<transport>(tpipe::layout::one_rank_per_process(K, D), pipeline_id{.replica = replica_},
                                                 active_comm_->native(), links_.get());
        pipeline_ = std::make_unique<communicator>(active_comm_->split(replica_, rank_));
        replicas_ = std::make_unique<communicator>(active_comm_->split(rank_, replica_));
        replicas_->set_reduction_order(reduction_order::rank_order);  // as on threads: independent of the cuts
        std::vector<bool> here(static_cast<std::size_t>(K), false);
        here[static_cast<std::size_t>(rank_)] = true;
        auto& pipe = model_->build(elastic::stage_request{shape_.stage_cuts, shape_.frozen, threads_, here});
        const auto prog = make_schedule(elastic::schedule_for(shape_.units)).program(topology{.ranks = K}, shape_.units);
        run_options opts;
        opts.watchdog = o_.watchdog;
        if (D > 1) {
            std::vector<communicator*> comms(static_cast<std::size_t>(K), nullptr);
            comms[static_cast<std::size_t>(rank_)] = replicas_.get();
            dp_ = std::make_unique<data_parallel<communicator>>(pipe, comms);
            opts.after_backward = dp_->hook();
        }
        runner_ = std::make_unique<runner_t>(pipe, prog, engine_, *transport_, opts);
        return agreed;
    }

    double step(std::int64_t step)
    {
        double mine = 0;
        if (active_) {
            const auto ids = sampler_.shard(step, replica_, shape_.replicas);
            std::vector<out_t> frozen;
            if (shape_.frozen > 0 && rank_ == 0)  // only stage 0 reads the frozen prefix's outputs
                frozen = elastic::frozen_outputs<out_t>(
                    ids, shape_.frozen, cache_.get(),
                    [&](std::size_t i, std::optional<out_t> from, int lo, int hi) {
                        return model_->run_frozen(ids[i], std::move(from), lo, hi);
                    },
                    rows_);
            model_->begin_step(ids, std::move(frozen));
            runner_->run(model_->io());
            mine = model_->finish_step();
            if (pipeline_->size() > 1) {
                const gradient_view g = model_->trainable_gradients();
                sync_wait(sum_gradients(*pipeline_, g));
            }
        }
        // The mean loss over the plan's replicas, added as the thread driver adds it.
        const double loss = sync_wait(replica_mean(world_, mine, shape_.stages, shape_.replicas));
        if (active_) model_->optimizer_step();
        return loss;
    }

    //! Among the processes of the current plan (an idle one's state is stale by design).
    bool replicas_identical()
    {
        state::checksum sum(state::checksum_kind::fnv1a64);
        for (auto s : model_->trainable_state()) sum.update(s);
        const auto all = every_process_value(static_cast<std::int64_t>(sum.value()));
        const int n = shape_.stages * shape_.replicas;
        return std::all_of(all.begin(), all.begin() + n, [&](std::int64_t v) { return v == all.front(); });
    }
    elastic::frozen_counters frozen_rows()
    {
        std::vector<std::int64_t> v{rows_.full, rows_.extended, rows_.cached};
        sync_wait(sum_all(world_, std::span<std::int64_t>(v)));
        return {v[0], v[1], v[2]};
    }
    elastic::cache_stats cache_stats() const { return cache_ ? cache_->stats() : elastic::cache_stats{}; }

private:
    using out_t = typename M::frozen_output;
    using pipe_t = uniform_pipeline<typename M::stage_type>;
    using runner_t = runner<pipe_t, cpu_engine>;  // the one runner type (over a link_transport)

    static task<void> broadcast(communicator& c, std::span<std::byte> bytes) { co_await c.broadcast(bytes, 0); }
    static task<void> barrier(communicator& c) { co_await c.barrier(); }
    template <class T>
    static task<void> sum_all(communicator& c, std::span<T> v) { co_await c.all_reduce_sum(v); }
    static task<void> sum_gradients(communicator& c, const gradient_view& g)
    {
        for (auto s : g.f32) co_await c.all_reduce_sum(s);
        for (auto s : g.f64) co_await c.all_reduce_sum(s);
    }

    //! Every process's value, in process order.
    template <class T>
    std::vector<T> every_process_value(T mine)
    {
        return sync_wait(every_member(world_, mine));
    }
    bool every_process(bool ok)
    {
        const auto all = every_process_value(std::int32_t{ok ? 1 : 0});
        return std::find(all.begin(), all.end(), 0) == all.end();
    }
    std::vector<std::byte> flat_state() { return elastic::flatten_state(model_->trainable_state()); }
    //! A directory for the processes' cache entries (one machine), made by process 0.
    std::filesystem::path shared_directory()
    {
        std::string dir(4096, '\0');
        if (me_ == 0) {
            std::string templ = (std::filesystem::temp_directory_path() / "tpipe-elastic-cache-XXXXXX").string();
            if (!::mkdtemp(templ.data())) throw error("tpipe::mpi::elastic_driver: cannot create a cache directory " + templ);
            std::copy(templ.begin(), templ.end(), dir.begin());
        }
        sync_wait(broadcast(world_, std::as_writable_bytes(std::span<char>(dir))));
        return std::filesystem::path(dir.c_str());
    }
    void tear_down()
    {
        runner_.reset();
        dp_.reset();
        replicas_.reset();
        pipeline_.reset();
        transport_.reset();
        links_.reset();
        active_comm_.reset();
    }

    std::unique_ptr<M> model_;
    std::int64_t samples_;
    elastic::driver_options o_;
    int threads_;
    elastic::epoch_sampler sampler_;
    communicator world_;
    int me_ = 0, replica_ = 0, rank_ = 0;
    bool active_ = true;  //!< this process runs a rank of the current plan
    elastic::interval_shape shape_;
    cpu_engine engine_{1};
    std::filesystem::path shared_dir_;
    std::unique_ptr<elastic::activation_cache<out_t>> cache_;
    link_maker make_links_;
    std::unique_ptr<tpipe::link_engine> links_;  // the plan's payload engine (outlives its transport)
    std::unique_ptr<transport> transport_;
    std::unique_ptr<communicator> active_comm_, pipeline_, replicas_;
    std::unique_ptr<data_parallel<communicator>> dp_;
    std::unique_ptr<runner_t> runner_;
    elastic::frozen_counters rows_;
};

} // namespace tpipe::mpi
