#pragma once
// The elastic driver on threads: every replica of a freezable_model in this process, one device
// (a cpu_engine loop) per pipeline rank of every replica. It holds what PipeTransformer adds to a
// trainer: the freeze policy and AutoPipe (shape_planner), AutoDP (replicas, their thread
// communicators and the gradient all-reduce, the state hand-over to new replicas), AutoCache
// (one activation_cache shared by the replicas) and the sampler (epoch_sampler: every sample
// once per epoch whatever the replica count).
//
//   tpipe::elastic::thread_driver<my_model> d([&] { return std::make_unique<my_model>(...); },
//                                            samples, options, my_model_costs, freezable);
//   auto report = d.run([](const tpipe::elastic::interval_report& r) { print(r.plan); });
//   d.replica(0);   // the trained model
//
// Checkpoints: driver_options::after_step names each step's plan (save replica(0)'s state with
// it); a resumed run loads replica(0) and passes the saved plan's resume_point to run().
//
// A new replica is made by the factory (the weights a process that has not trained holds) and
// then receives replica 0's trainable state by a broadcast over a communicator of all replicas.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/on_threads.hpp"
#include "tpipe/async/thread_crew.hpp"
#include "tpipe/elastic/driver_loop.hpp"
#include "tpipe/elastic/freezable_model.hpp"
#include "tpipe/elastic/sampler.hpp"
#include "tpipe/exec/data_parallel.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/schedule/by_name.hpp"

namespace tpipe::elastic {

//! Compute threads of each stage when `hw` threads run K stages x D replicas.
inline int threads_per_stage(int hw, int stages, int replicas) { return std::max(1, hw / (stages * replicas)); }

//! Compute threads in all: options::threads, or every hardware thread.
inline int compute_threads(const driver_options& o)
{
    return o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

template <freezable_model M>
class thread_driver {
public:
    using factory = std::function<std::unique_ptr<M>()>;

    thread_driver(factory make, std::int64_t samples, driver_options o)
        : make_(std::move(make)), samples_(samples), o_(std::move(o)),
          sampler_({.samples = samples, .batch = o_.batch, .seed = o_.seed})
    {
        tpipe::detail::require(o_.devices >= 1, "elastic training needs at least 1 device, got " + std::to_string(o_.devices));
        if (o_.autocache) cache_ = std::make_unique<activation_cache<out_t>>(cache_options{.host_bytes = o_.cache_bytes});
        reps_.push_back(std::make_unique<slot>(make_()));
    }
    ~thread_driver()
    {
        for (auto& r : reps_) r->tear_down();
    }

    //! Trains o.steps steps, from the start or, resumed, from `from` (replica(0) must then hold
    //! that step's state: a checkpoint loaded into it); `on_interval` (optional) sees each
    //! interval when it ends.
    run_report run(const std::function<void(const interval_report&)>& on_interval = {},
                   const std::optional<resume_point>& from = {})
    {
        const shape_planner planner(reps_.front()->model->unit_costs(), reps_.front()->model->freezable_units(), o_);
        return run_intervals(samples_, o_, planner, *this, on_interval, from);
    }

    //! Replica d's model (0 always exists; after run, every replica holds its trainable state).
    M& replica(int d) { return *reps_.at(static_cast<std::size_t>(d))->model; }
    int replicas() const { return static_cast<int>(reps_.size()); }

    // ---- the backend of run_intervals ------------------------------------------------------
    bool reshape(const interval_shape& next)
    {
        for (auto& r : reps_) {
            r->tear_down();
            r->model->freeze(next.frozen);
        }
        groups_.clear();
        crew_.reset();
        engine_.reset();
        const auto before = flatten_state(reps_.front()->model->trainable_state());
        // AutoDP: new replicas (holding the factory's weights), then replica 0's state to all.
        const auto old_replicas = reps_.size();
        while (static_cast<int>(reps_.size()) < next.replicas) {
            reps_.push_back(std::make_unique<slot>(make_()));
            reps_.back()->model->freeze(next.frozen);
        }
        if (reps_.size() > old_replicas) {
            thread_group all(static_cast<int>(reps_.size()));
            tpipe::on_threads(reps_.size(), [&](std::size_t d) {
                auto member = all.member(static_cast<int>(d));
                sync_wait(receive_state(member, *reps_[d]->model));
            });
        }
        bool kept = true;
        for (auto& r : reps_) kept = flatten_state(r->model->trainable_state()) == before && kept;
        // AutoPipe: the new pipelines, their runners and the gradient all-reduce.
        shape_ = next;
        const int K = shape_.stages, D = shape_.replicas, per_stage = threads_per_stage(compute_threads(o_), K, D);
        engine_ = std::make_unique<cpu_engine>(K * D);
        crew_ = std::make_unique<thread_crew>(static_cast<std::size_t>(D));
        if (D > 1)
            for (int s = 0; s < K; ++s) groups_.push_back(std::make_unique<thread_group>(D));
        const auto prog = make_schedule(schedule_for(shape_.units)).program(topology{.ranks = K}, shape_.units);
        for (int d = 0; d < D; ++d) {
            slot& r = *reps_[static_cast<std::size_t>(d)];
            auto& pipe = r.model->build(stage_request{shape_.stage_cuts, shape_.frozen, per_stage, {}});
            run_options opts;
            opts.watchdog = o_.watchdog;
            for (int k = 0; k < K; ++k) opts.device_of_rank.push_back(d * K + k);
            if (D > 1) {
                for (auto& g : groups_) r.members.push_back(g->member(d));
                // The rank-order fold: its sums do not depend on how the stages cut the gradients,
                // so re-cutting the pipeline never changes the arithmetic (the ring's segments would).
                for (auto& m : r.members) m.set_reduction_order(reduction_order::rank_order);
                std::vector<thread_communicator*> comms;
                for (auto& m : r.members) comms.push_back(&m);
                r.dp = std::make_unique<data_parallel<thread_communicator>>(pipe, comms);
                opts.after_backward = r.dp->hook();
            }
            r.runner = std::make_unique<runner_t>(pipe, prog, *engine_, opts);
        }
        return kept;
    }

    double step(std::int64_t step)
    {
        const int D = shape_.replicas;
        std::vector<std::vector<std::int64_t>> ids;  // drawn here: the sampler is not thread-safe
        for (int d = 0; d < D; ++d) ids.push_back(sampler_.shard(step, d, D));
        crew_->run([&](std::size_t d) {  // replicas side by side
            slot& r = *reps_[d];
            const auto& mine = ids[d];
            std::vector<out_t> frozen;
            if (shape_.frozen > 0)
                frozen = frozen_outputs<out_t>(
                    mine, shape_.frozen, cache_.get(),
                    [&](std::size_t i, std::optional<out_t> from, int lo, int hi) {
                        return r.model->run_frozen(mine[i], std::move(from), lo, hi);
                    },
                    r.rows);
            r.model->begin_step(mine, std::move(frozen));
            r.runner->run(r.model->io());
            r.loss = r.model->finish_step();
            r.model->optimizer_step();  // its gradients are all-reduced: the replicas step side by side
        });
        double loss = 0;
        for (int d = 0; d < D; ++d) loss += reps_[static_cast<std::size_t>(d)]->loss / D;
        return loss;
    }

    bool replicas_identical()
    {
        const auto first = reps_.front()->model->trainable_state();
        for (int d = 1; d < shape_.replicas; ++d)
            if (!same_state(reps_[static_cast<std::size_t>(d)]->model->trainable_state(), first)) return false;
        return true;
    }
    frozen_counters frozen_rows() const
    {
        frozen_counters c;
        for (const auto& r : reps_) c += r->rows;
        return c;
    }
    tpipe::elastic::cache_stats cache_stats() const { return cache_ ? cache_->stats() : tpipe::elastic::cache_stats{}; }

private:
    using out_t = typename M::frozen_output;
    using pipe_t = uniform_pipeline<typename M::stage_type>;
    using runner_t = runner<pipe_t, cpu_engine>;

    struct slot {
        std::unique_ptr<M> model;
        std::vector<thread_communicator> members;  // per stage, among the replicas
        std::unique_ptr<data_parallel<thread_communicator>> dp;
        std::unique_ptr<runner_t> runner;
        frozen_counters rows;
        double loss = 0;
        explicit slot(std::unique_ptr<M> m) : model(std::move(m)) {}
        void tear_down()
        {
            runner.reset();
            dp.reset();
            members.clear();
        }
    };

    //! AutoDP's hand-over: replica 0's trainable state to this replica.
    static task<void> receive_state(thread_communicator& c, M& m)
    {
        for (auto s : m.trainable_state()) co_await c.broadcast(s, 0);
    }

    factory make_;
    std::int64_t samples_;
    driver_options o_;
    epoch_sampler sampler_;
    std::unique_ptr<activation_cache<out_t>> cache_;
    std::unique_ptr<cpu_engine> engine_;  // declared before reps_: outlives the runners on it
    std::unique_ptr<thread_crew> crew_;   // a thread per replica, for the steps
    std::vector<std::unique_ptr<slot>> reps_;
    std::vector<std::unique_ptr<thread_group>> groups_;
    interval_shape shape_;
};

} // namespace tpipe::elastic
