#include "gpt/elastic_plan.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <stdexcept>
#include <string>

#include <tpipe/elastic/freeze.hpp>
#include <tpipe/elastic/fraction.hpp>

namespace gpt {

namespace {

//! Units: layers 0..L-1, then the tail. Cost: the parameters a unit multiplies by (the embedding
//! is a lookup and costs nothing) -- the paper's proxy, the same on every process.
std::vector<double> unit_costs(const config& cfg)
{
    const layout lay(cfg);
    std::vector<double> c;
    for (const auto& b : lay.blocks) c.push_back(static_cast<double>(b.end - b.begin));
    c.push_back(static_cast<double>(cfg.vocab) * cfg.d_model + 2.0 * cfg.d_model);
    return c;
}

tpipe::autopipe_options autopipe_options_of(const elastic_options& o)
{
    tpipe::autopipe_options a;
    a.devices = o.devices;
    a.initial_stages = o.devices;
    a.min_stages = o.autopipe ? 1 : o.devices;  // without AutoPipe the pipeline keeps its length
    a.add_replicas = o.autodp;
    a.batch = o.batch;
    return a;
}

//! The options' freeze function as a tpipe freeze policy (checked by tpipe::next_frozen).
struct function_policy {
    const std::function<int(int, int)>* f;
    int next_frozen(const tpipe::freeze_observation& ob) const { return (*f)(ob.epoch, ob.frozen); }
};

} // namespace

tpipe::replan_record elastic_shape::record(int interval, bool cached) const
{
    tpipe::replan_record r;
    r.epoch = interval;
    r.frozen = frozen;
    r.stages = stages;
    r.replicas = replicas;
    r.microbatches = microbatches;
    r.cuts = unit_cuts;
    r.cached = cached && frozen > 0;
    r.predicted_throughput = predicted_throughput;
    return r;
}

unit_seconds measure_units(const config& cfg, std::int64_t seq_len, int threads)
{
    parameters<float> p(cfg);
    p.init(1);
    batch one{1, seq_len, std::vector<std::int32_t>(static_cast<std::size_t>(seq_len)),
              std::vector<std::int32_t>(static_cast<std::size_t>(seq_len))};
    for (std::int64_t t = 0; t < seq_len; ++t) {
        one.inputs[static_cast<std::size_t>(t)] = static_cast<std::int32_t>((t * 7 + 3) % cfg.vocab);
        one.targets[static_cast<std::size_t>(t)] = static_cast<std::int32_t>((t * 5 + 1) % cfg.vocab);
    }
    const tpipe::unit u{0, 0, 0, 1, 0, seq_len};
    const activation<float> x{1, seq_len, std::vector<float>(static_cast<std::size_t>(seq_len * cfg.d_model), 0.5f)};
    unit_seconds s;
    auto best_of = [&](int l0, int l1, bool first, bool last, double& f, double& b) {
        part<float> q(p, l0, l1, first, last, threads);
        f = b = std::numeric_limits<double>::infinity();
        for (int rep = 0; rep < 3; ++rep) {
            q.begin(&one);
            const auto t0 = std::chrono::steady_clock::now();
            auto y = q.forward(u, first ? activation<float>{} : x);
            const auto t1 = std::chrono::steady_clock::now();
            q.backward(u, last ? activation<float>{} : activation<float>{1, seq_len, x.data});
            const auto t2 = std::chrono::steady_clock::now();
            f = std::min(f, std::chrono::duration<double>(t1 - t0).count());
            b = std::min(b, std::chrono::duration<double>(t2 - t1).count());
        }
    };
    for (int l = 0; l <= cfg.layers; ++l) {
        double f = 0, b = 0;
        if (l < cfg.layers) best_of(l, l + 1, l == 0, false, f, b);
        else best_of(l, l, false, true, f, b);  // the tail
        s.forward.push_back(f);
        s.backward.push_back(b);
    }
    return s;
}

tpipe::stage_times gpt_latency::stage_times(std::span<const int> cuts, int frozen) const
{
    tpipe::stage_times t;
    for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
        double f = 0, b = 0;
        for (int i = cuts[s]; i < cuts[s + 1]; ++i) {
            const auto k = static_cast<std::size_t>(i);
            if (i >= frozen) b += units.backward[k];
            if (i >= frozen || !cached) f += units.forward[k];
        }
        t.forward.push_back(f);
        t.backward.push_back(b);
    }
    return t;
}

elastic_planner::elastic_planner(const config& cfg, const elastic_options& o, int threads, unit_seconds measured)
    : cfg_(cfg), o_(o),
      latency_{measured.forward.empty() ? measure_units(cfg, cfg.seq_len, std::max(1, threads / std::max(1, o.devices)))
                                        : std::move(measured),
               o.autocache},
      autopipe_(unit_costs(cfg), autopipe_options_of(o), latency_)
{
    if (static_cast<int>(latency_.units.forward.size()) != cfg.layers + 1)
        throw std::invalid_argument("elastic_planner: unit times for " + std::to_string(latency_.units.forward.size()) +
                                    " units; the model has " + std::to_string(cfg.layers + 1));
}

int elastic_planner::next_frozen(int interval, int frozen) const
{
    // Without AutoPipe the pipeline keeps its `devices` stages, each with an active unit (of the
    // layers and the head): at most layers + 1 - devices layers may freeze.
    int cap = o_.max_frozen < 0 ? cfg_.layers : o_.max_frozen;
    if (!o_.autopipe) cap = std::min(cap, cfg_.layers + 1 - o_.devices);
    const tpipe::freeze_observation ob{interval, cfg_.layers, frozen, std::max(cap, 0), {}};
    if (o_.freeze) {
        function_policy p{&o_.freeze};
        return tpipe::next_frozen(p, ob);
    }
    tpipe::progressive_freeze p(tpipe::fraction::nearest(o_.alpha));
    return tpipe::next_frozen(p, ob);
}

elastic_shape elastic_planner::initial() const { return complete(autopipe_.initial()); }

elastic_shape elastic_planner::replan(int frozen, int stages) const { return complete(autopipe_.replan(frozen, stages)); }

elastic_shape elastic_planner::complete(const tpipe::pipeline_shape& s) const
{
    elastic_shape e;
    e.frozen = s.frozen;
    e.stages = s.stages;
    e.replicas = s.replicas;
    e.unit_cuts = s.layers.cuts;
    e.layer_cuts.assign(s.layers.cuts.begin(), s.layers.cuts.end() - 1);
    e.layer_cuts.front() = s.frozen;
    e.layer_cuts.push_back(cfg_.layers);
    // Microbatches for this replica's share of the global batch (autopipe chose them for the
    // whole batch on one pipeline).
    const int share = o_.batch / e.replicas;
    const auto choice = tpipe::choose_microbatches(latency_.stage_times(e.unit_cuts, e.frozen), share);
    e.microbatches = choice.microbatches;
    e.predicted_throughput = static_cast<double>(o_.batch) / choice.iteration_seconds;
    return e;
}

} // namespace gpt
