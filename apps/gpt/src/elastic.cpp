#include "gpt/elastic.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include <tpipe/elastic/sampler.hpp>
#include <tpipe/elastic/thread_driver.hpp>
#include <tpipe/schedule/by_name.hpp>

#include "gpt/elastic_gpt.hpp"
#include "gpt/frozen.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/planning.hpp"

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

tpipe::elastic::token_slicing profile_token_slicing(const config& cfg, const window_dataset& data,
                                                    const elastic_options& o, int threads)
{
    const std::int64_t g = o.terapipe_granularity;
    if (g < 1 || cfg.seq_len % g != 0)
        throw std::invalid_argument("the TeraPipe granularity " + std::to_string(g) + " must divide the sequence length " +
                                    std::to_string(cfg.seq_len));
    std::vector<std::int64_t> first(static_cast<std::size_t>(o.batch));
    for (std::size_t i = 0; i < first.size(); ++i) first[i] = static_cast<std::int64_t>(i);
    const batch probe = data.rows(first);
    tpipe::elastic::token_slicing t;
    t.units = profile_units(cfg, probe, tpipe::token_profile_grid(o.batch, cfg.seq_len, g), threads);
    t.granularity = g;
    return t;
}

namespace {

//! The driver's options for the GPT: its sequence length and, with TeraPipe slices, the
//! per-layer token latencies (profiled here unless given).
tpipe::elastic::driver_options driver_options_of(const config& cfg, const window_dataset& data, const elastic_options& o)
{
    tpipe::elastic::driver_options d = o;
    d.seq_len = cfg.seq_len;
    if (d.measured.forward.empty())
        d.measured = measure_units(cfg, cfg.seq_len, std::max(1, compute_threads(o) / std::max(1, o.devices)));
    if (o.terapipe_granularity > 0 && !d.slicing)
        d.slicing = profile_token_slicing(cfg, data, o, std::max(1, compute_threads(o) / std::max(1, o.devices)));
    return d;
}

//! The order a pipeline stage runs the units of `prog` in: its forwards, and its backwards, each
//! the same on every rank (a linear pipeline passes units on in order). Refuses a program whose
//! ranks disagree, which one sequential part could not reproduce bitwise.
struct stage_order {
    std::vector<std::pair<tpipe::op, tpipe::unit>> actions;
};
stage_order order_of(const tpipe::program& prog)
{
    std::vector<std::vector<std::pair<tpipe::op, tpipe::unit>>> per_rank(prog.actions.size());
    for (std::size_t r = 0; r < prog.actions.size(); ++r)
        for (const auto& a : prog.actions[r])
            if (a.kind == tpipe::op::F || a.kind == tpipe::op::B)
                per_rank[r].emplace_back(a.kind, prog.units.at(a.microbatch, a.slice));
    auto only = [](const auto& seq, tpipe::op k) {
        std::vector<tpipe::unit> u;
        for (const auto& [kind, x] : seq)
            if (kind == k) u.push_back(x);
        return u;
    };
    for (std::size_t r = 1; r < per_rank.size(); ++r)
        if (only(per_rank[r], tpipe::op::F) != only(per_rank[0], tpipe::op::F) ||
            only(per_rank[r], tpipe::op::B) != only(per_rank[0], tpipe::op::B))
            throw std::invalid_argument("train_frozen_reference: the program's ranks run units in different orders");
    return {per_rank.front()};
}

} // namespace

elastic_result train_elastic(const config& cfg, const window_dataset& data, const elastic_options& o,
                             const std::function<void(const interval_report&)>& on_interval, const elastic_hooks& hooks)
{
    if (o.devices < 1) throw std::invalid_argument("elastic training needs at least 1 device, got " + std::to_string(o.devices));
    elastic_gpt* first = nullptr;  // replica 0, once the driver has made it
    tpipe::elastic::driver_options d = driver_options_of(cfg, data, o);
    if (hooks.after_step)
        d.after_step = [&](std::int64_t done, const tpipe::elastic::replan_record& plan) {
            hooks.after_step(done, plan, first->params(), first->optimizer());
        };
    tpipe::elastic::thread_driver<elastic_gpt> driver(
        [&] { return std::make_unique<elastic_gpt>(cfg, data, o.opt, o.seed); }, data.samples(), std::move(d));
    first = &driver.replica(0);
    std::optional<tpipe::elastic::resume_point> from;
    if (hooks.resume) from = hooks.resume(first->params(), first->optimizer());
    elastic_result res;
    static_cast<tpipe::elastic::run_report&>(res) = driver.run(on_interval, from);
    if (hooks.after_run) hooks.after_run(res, first->params(), first->optimizer());
    res.weights = first->params().value;
    return res;
}

std::vector<float> train_frozen_reference(const config& cfg, const window_dataset& data, const elastic_options& o,
                                          const std::vector<interval_report>& plan)
{
    parameters<float> p(cfg);
    p.init(o.seed);
    adamw<float> opt(p, o.opt);
    tpipe::elastic::epoch_sampler sampler({.samples = data.samples(), .batch = o.batch, .seed = o.seed});
    const int hw = compute_threads(o);
    std::vector<float> sum;
    for (const auto& iv : plan) {
        const int F = iv.plan.frozen, D = iv.plan.replicas, K = iv.plan.stages;
        const int threads = tpipe::elastic::threads_per_stage(hw, K, D);
        frozen_prefix<float> prefix(p, threads);
        opt.freeze(p.lay.frozen_end(F));
        part<float> whole(p, F, cfg.layers, F == 0, true, threads);
        const auto prog =
            tpipe::make_schedule(tpipe::elastic::schedule_for(iv.units)).program(tpipe::topology{.ranks = K}, iv.units);
        const auto order = order_of(prog);
        for (std::int64_t step = iv.first_step; step < iv.first_step + iv.steps; ++step) {
            for (int d = 0; d < D; ++d) {
                const auto ids = sampler.shard(step, d, D);
                const batch b = data.rows(ids);
                const activation<float> x = F > 0 ? prefix.forward(b, ids, F) : activation<float>{};
                p.zero_grad();
                whole.begin(&b);
                for (const auto& [kind, u] : order.actions) {  // as a pipeline stage runs them
                    if (kind == tpipe::op::F) whole.forward(u, F > 0 ? unit_slice(x, u, cfg.d_model) : activation<float>{});
                    else whole.backward(u, {});
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
