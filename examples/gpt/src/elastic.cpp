#include "gpt/elastic.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include <tpipe/comm/thread_communicator.hpp>
#include <tpipe/elastic/autopipe.hpp>
#include <tpipe/elastic/freeze.hpp>
#include <tpipe/elastic/sampler.hpp>
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/exec/sync_wait.hpp>
#include <tpipe/exec/task.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "gpt/elastic_loop.hpp"
#include "gpt/elastic_plan.hpp"
#include "gpt/frozen.hpp"
#include "gpt/on_threads.hpp"
#include "gpt/pipeline.hpp"

namespace gpt {

// ---- data ----------------------------------------------------------------------------------
window_dataset::window_dataset(const std::string& text, std::int64_t seq_len, std::int64_t global_batch)
    : text_(&text), seq_len_(seq_len)
{
    if (seq_len < 1 || global_batch < 1)
        throw std::invalid_argument("window_dataset: seq_len and the global batch must be >= 1");
    const std::int64_t windows = text.empty() ? 0 : static_cast<std::int64_t>(text.size() - 1) / seq_len;
    samples_ = windows / global_batch * global_batch;
    if (samples_ < global_batch)
        throw std::invalid_argument("the text has " + std::to_string(text.size()) + " bytes: " + std::to_string(windows) +
                                    " samples of " + std::to_string(seq_len) + " tokens, fewer than one global batch of " +
                                    std::to_string(global_batch) + "; use a longer text or a smaller --batch / --seq-len");
}

batch window_dataset::rows(std::span<const std::int64_t> ids) const
{
    batch b;
    b.rows = static_cast<std::int64_t>(ids.size());
    b.seq_len = seq_len_;
    b.inputs.reserve(static_cast<std::size_t>(b.rows * seq_len_));
    b.targets.reserve(b.inputs.capacity());
    for (std::int64_t id : ids) {
        if (id < 0 || id >= samples_)
            throw std::invalid_argument("window_dataset: sample " + std::to_string(id) + " is outside [0, " +
                                        std::to_string(samples_) + ")");
        const auto* p = reinterpret_cast<const unsigned char*>(text_->data()) + id * seq_len_;
        for (std::int64_t t = 0; t < seq_len_; ++t) {
            b.inputs.push_back(p[t]);
            b.targets.push_back(p[t + 1]);
        }
    }
    return b;
}

namespace {

parameters<float> initial_weights(const config& cfg, std::uint64_t seed)
{
    parameters<float> p(cfg);
    p.init(seed);
    return p;
}

//! One data-parallel replica: its weights and optimizer, its frozen prefix and its pipeline.
struct replica {
    using pipe_t = tpipe::uniform_pipeline<stage<float>>;
    using runner_t = tpipe::runner<pipe_t, tpipe::cpu_engine>;

    parameters<float> params;
    adamw<float> opt;
    std::unique_ptr<frozen_prefix<float>> prefix;
    std::unique_ptr<pipelined_model<float>> model;
    std::vector<tpipe::thread_communicator> members;  // per stage, among the replicas
    std::unique_ptr<tpipe::data_parallel<tpipe::thread_communicator>> dp;
    std::unique_ptr<runner_t> runner;
    activation<float> frozen_out;  // this step's frozen-prefix output (stage 0's source)
    double loss = 0;

    //! A replica that joins holds what a process that has not trained would: the initial weights.
    replica(const config& cfg, const elastic_options& o) : params(initial_weights(cfg, o.seed)), opt(params, o.opt) {}

    void tear_down()
    {
        runner.reset();
        dp.reset();
        members.clear();
        model.reset();
        prefix.reset();
    }
};

//! AutoDP's hand-over: replica 0's weights and optimizer state to every replica, by a broadcast
//! over a communicator of all of them (run on one thread per member).
tpipe::task<void> receive_state(tpipe::thread_communicator& c, replica& r)
{
    co_await c.broadcast(std::as_writable_bytes(std::span<float>(r.params.value)), 0);
    co_await c.broadcast(std::as_writable_bytes(r.opt.first_moments()), 0);
    co_await c.broadcast(std::as_writable_bytes(r.opt.second_moments()), 0);
    co_await c.broadcast(std::as_writable_bytes(std::span<std::int64_t>(&r.opt.step_count(), 1)), 0);
}

struct state_snapshot {
    std::vector<float> value, m, v;
    std::int64_t t = 0;
    explicit state_snapshot(replica& r)
        : value(r.params.value), m(r.opt.first_moments().begin(), r.opt.first_moments().end()),
          v(r.opt.second_moments().begin(), r.opt.second_moments().end()), t(r.opt.step_count())
    {
    }
    //! Whether `r` holds this state, its optimizer frozen further from `from` to its frozen().
    bool held_by(replica& r, std::int64_t from) const
    {
        const auto drop = static_cast<std::ptrdiff_t>(r.opt.frozen() - from);
        auto m1 = r.opt.first_moments(), v1 = r.opt.second_moments();
        return r.params.value == value && r.opt.step_count() == t && static_cast<std::ptrdiff_t>(m.size()) - drop == static_cast<std::ptrdiff_t>(m1.size()) &&
               std::equal(m1.begin(), m1.end(), m.begin() + drop) && std::equal(v1.begin(), v1.end(), v.begin() + drop);
    }
};


//! The thread backend of run_elastic_loop: every replica and stage in this process, one device
//! (loop thread) per pipeline rank of every replica.
//! Threads for each part when `hw` threads run K stages x D replicas (the reference builds its
//! parts the same way; the kernels' bits do not depend on it).
inline int threads_per_part(int hw, int stages, int replicas) { return std::max(1, hw / (stages * replicas)); }

class thread_backend {
public:
    thread_backend(const config& cfg, const window_dataset& data, const elastic_options& o, int threads)
        : cfg_(cfg), data_(data), o_(o), hw_(threads), sampler_({.samples = data.samples(), .batch = o.batch, .seed = o.seed})
    {
        if (o.autocache)
            cache_ = std::make_unique<frozen_prefix<float>::cache_type>(tpipe::elastic::cache_options{.host_bytes = o.cache_bytes});
        reps_.push_back(std::make_unique<replica>(cfg, o));
    }

    bool reshape(const elastic_shape& next)
    {
        const state_snapshot before(*reps_.front());
        const std::int64_t frozen_from = reps_.front()->opt.frozen();
        for (auto& r : reps_) {
            retire(*r);
            r->tear_down();
            r->opt.freeze(r->params.lay.frozen_end(next.frozen));
        }
        groups_.clear();
        engine_.reset();
        // AutoDP: new replicas (holding the initial weights), then replica 0's state to all.
        const auto old_replicas = reps_.size();
        while (static_cast<int>(reps_.size()) < next.replicas) {
            reps_.push_back(std::make_unique<replica>(cfg_, o_));
            reps_.back()->opt.freeze(reps_.back()->params.lay.frozen_end(next.frozen));
        }
        if (reps_.size() > old_replicas) {
            tpipe::thread_group all(next.replicas);
            on_threads(reps_.size(), [&](std::size_t d) {
                auto member = all.member(static_cast<int>(d));
                tpipe::sync_wait(receive_state(member, *reps_[d]));
            });
        }
        bool kept = true;
        for (auto& r : reps_) kept = before.held_by(*r, frozen_from) && kept;
        // AutoPipe: the new pipelines, their runners and the gradient all-reduce.
        shape_ = next;
        const int K = shape_.stages, D = shape_.replicas, threads_per_part = gpt::threads_per_part(hw_, K, D);
        engine_ = std::make_unique<tpipe::cpu_engine>(K * D);
        if (D > 1)
            for (int s = 0; s < K; ++s) groups_.push_back(std::make_unique<tpipe::thread_group>(D));
        const auto units = tpipe::microbatch_slicer{shape_.microbatches}.scheme(tpipe::batch_shape{o_.batch / D, cfg_.seq_len});
        const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{.ranks = K}, units);
        for (int d = 0; d < D; ++d) {
            replica& r = *reps_[static_cast<std::size_t>(d)];
            r.model = std::make_unique<pipelined_model<float>>(r.params, K, threads_per_part, shape_.layer_cuts);
            if (shape_.frozen > 0) {
                r.prefix = std::make_unique<frozen_prefix<float>>(r.params, threads_per_part, cache_.get());
                r.model->set_source([&r, dm = cfg_.d_model](const tpipe::unit& u) { return unit_slice(r.frozen_out, u, dm); });
            }
            tpipe::run_options opts;
            for (int k = 0; k < K; ++k) opts.device_of_rank.push_back(d * K + k);
            if (D > 1) {
                for (auto& g : groups_) r.members.push_back(g->member(d));
                // The rank-order fold: its sums do not depend on how the stages cut the gradients,
                // so they equal train_frozen_reference's whatever the plan (the ring's segments would).
                for (auto& m : r.members) m.set_reduction_order(tpipe::reduction_order::rank_order);
                std::vector<tpipe::thread_communicator*> comms;
                for (auto& m : r.members) comms.push_back(&m);
                r.dp = std::make_unique<tpipe::data_parallel<tpipe::thread_communicator>>(r.model->pipe(), comms);
                opts.after_backward = r.dp->hook();
            }
            r.runner = std::make_unique<replica::runner_t>(r.model->pipe(), prog, *engine_, opts);
        }
        return kept;
    }

    double step(std::int64_t step)
    {
        const int D = shape_.replicas;
        std::vector<std::vector<std::int64_t>> ids;  // drawn here: the sampler is not thread-safe
        for (int d = 0; d < D; ++d) ids.push_back(sampler_.shard(step, d, D));
        on_threads(static_cast<std::size_t>(D), [&](std::size_t d) {  // replicas side by side
            replica& r = *reps_[d];
            const batch b = data_.rows(ids[d]);
            if (shape_.frozen > 0) r.frozen_out = r.prefix->forward(b, ids[d], shape_.frozen);
            r.model->begin_step(b);
            r.runner->run(r.model->io());
            r.loss = r.model->finish_step();
        });
        double loss = 0;
        for (int d = 0; d < D; ++d) {
            replica& r = *reps_[static_cast<std::size_t>(d)];
            r.opt.step(r.params);
            loss += r.loss / D;
        }
        return loss;
    }

    bool replicas_identical() const
    {
        for (int d = 1; d < shape_.replicas; ++d)
            if (reps_[static_cast<std::size_t>(d)]->params.value != reps_.front()->params.value) return false;
        return true;
    }

    frozen_prefix<float>::counters frozen_rows() const
    {
        auto c = retired_;
        for (const auto& r : reps_)
            if (r->prefix) add(c, r->prefix->count());
        return c;
    }
    tpipe::elastic::cache_stats cache_stats() const { return cache_ ? cache_->stats() : tpipe::elastic::cache_stats{}; }
    std::vector<float> weights() const { return reps_.front()->params.value; }

private:
    static void add(frozen_prefix<float>::counters& c, const frozen_prefix<float>::counters& x)
    {
        c.full += x.full;
        c.extended += x.extended;
        c.cached += x.cached;
    }
    void retire(replica& r)
    {
        if (r.prefix) add(retired_, r.prefix->count());
    }

    const config& cfg_;
    const window_dataset& data_;
    const elastic_options& o_;
    int hw_;
    tpipe::elastic::epoch_sampler sampler_;
    std::unique_ptr<frozen_prefix<float>::cache_type> cache_;
    std::unique_ptr<tpipe::cpu_engine> engine_;  // declared before reps_: outlives the runners on it
    std::vector<std::unique_ptr<replica>> reps_;
    std::vector<std::unique_ptr<tpipe::thread_group>> groups_;
    elastic_shape shape_;
    frozen_prefix<float>::counters retired_;
};

} // namespace

elastic_result train_elastic(const config& cfg, const window_dataset& data, const elastic_options& o,
                             const std::function<void(const interval_report&)>& on_interval)
{
    if (o.devices < 1) throw std::invalid_argument("elastic training needs at least 1 device, got " + std::to_string(o.devices));
    if (o.batch % o.devices != 0)
        throw std::invalid_argument("the global batch (" + std::to_string(o.batch) + ") must be a multiple of the " +
                                    std::to_string(o.devices) + " devices, so that any replica count shares it equally");
    const int hw = compute_threads(o);
    const elastic_planner planner(cfg, o, hw, o.measured);
    thread_backend be(cfg, data, o, hw);
    return run_elastic_loop(data, o, planner, be, on_interval);
}

std::vector<float> train_frozen_reference(const config& cfg, const window_dataset& data, const elastic_options& o,
                                          const std::vector<interval_report>& plan)
{
    parameters<float> p = initial_weights(cfg, o.seed);
    adamw<float> opt(p, o.opt);
    tpipe::elastic::epoch_sampler sampler({.samples = data.samples(), .batch = o.batch, .seed = o.seed});
    const int hw = compute_threads(o);
    std::vector<float> sum;
    for (const auto& iv : plan) {
        const int F = iv.plan.frozen, D = iv.plan.replicas;
        const int threads = threads_per_part(hw, iv.plan.stages, D);
        frozen_prefix<float> prefix(p, threads);
        opt.freeze(p.lay.frozen_end(F));
        part<float> whole(p, F, cfg.layers, F == 0, true, threads);
        const auto units = tpipe::microbatch_slicer{iv.plan.microbatches}.scheme(tpipe::batch_shape{o.batch / D, cfg.seq_len});
        for (std::int64_t step = iv.first_step; step < iv.first_step + iv.steps; ++step) {
            for (int d = 0; d < D; ++d) {
                const auto ids = sampler.shard(step, d, D);
                const batch b = data.rows(ids);
                const activation<float> x = F > 0 ? prefix.forward(b, ids, F) : activation<float>{};
                p.zero_grad();
                whole.begin(&b);
                for (int i = 0; i < units.units(); ++i) {  // microbatches in order, as 1F1B's backwards run
                    const auto u = units.at(i);
                    whole.forward(u, F > 0 ? unit_slice(x, u, cfg.d_model) : activation<float>{});
                    whole.backward(u, {});
                }
                whole.flush_grad();
                if (d == 0) sum = p.grad;
                else
                    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += p.grad[k];
            }
            if (D > 1) {
                const float scale = 1.0f / static_cast<float>(D);
                for (float& g : sum) g *= scale;
            }
            p.grad = sum;
            opt.step(p);
        }
    }
    return p.value;
}

} // namespace gpt
