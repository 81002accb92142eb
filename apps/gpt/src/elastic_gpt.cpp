#include "gpt/elastic_gpt.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tpipe/elastic/step_prices.hpp>

#include "gpt/planning.hpp"

namespace gpt {

std::vector<double> unit_costs(const config& cfg)
{
    const layout lay(cfg);
    std::vector<double> c;
    for (const auto& b : lay.blocks) c.push_back(static_cast<double>(b.end - b.begin));
    c.push_back(static_cast<double>(cfg.vocab) * cfg.d_model + 2.0 * cfg.d_model);
    return c;
}

namespace {
parameters<float> initial_weights(const config& cfg, std::uint64_t seed)
{
    parameters<float> p(cfg);
    p.init(seed);
    return p;
}
} // namespace

elastic_gpt::elastic_gpt(const config& cfg, const window_dataset& data, adamw_options opt, std::uint64_t seed)
    : cfg_(cfg), data_(&data), params_(initial_weights(cfg, seed)), opt_(params_, opt)
{
}

std::vector<double> elastic_gpt::unit_costs() const { return gpt::unit_costs(cfg_); }

tpipe::uniform_pipeline<stage<float>>& elastic_gpt::build(const tpipe::elastic::stage_request& r)
{
    if (r.cuts.size() < 2 || r.cuts.back() != cfg_.layers + 1 || r.cuts.front() != r.frozen)
        throw std::invalid_argument("elastic_gpt::build: stage cuts must run from the frozen count to the " +
                                    std::to_string(cfg_.layers + 1) + " units (layers and the tail)");
    std::vector<int> layer_cuts(r.cuts.begin(), r.cuts.end() - 1);
    layer_cuts.push_back(cfg_.layers);  // the tail unit ends the last stage
    model_.reset();
    prefix_.reset();
    model_ = std::make_unique<pipelined_model<float>>(params_, r.stages(), r.threads, layer_cuts, r.here);
    if (r.frozen > 0) {
        prefix_ = std::make_unique<frozen_prefix<float>>(params_, r.threads);
        model_->set_source([this](const tpipe::unit& u) { return unit_slice(frozen_out_, u, cfg_.d_model); });
    }
    return model_->pipe();
}

void elastic_gpt::begin_step(std::span<const std::int64_t> ids, std::vector<activation<float>> frozen)
{
    batch_ = data_->rows(ids);
    if (!frozen.empty()) {
        const std::int64_t row = cfg_.seq_len * cfg_.d_model;
        frozen_out_ = activation<float>{batch_.rows, cfg_.seq_len, std::vector<float>(static_cast<std::size_t>(batch_.rows * row))};
        for (std::size_t r = 0; r < frozen.size(); ++r)
            std::copy(frozen[r].data.begin(), frozen[r].data.end(), frozen_out_.data.begin() + static_cast<std::ptrdiff_t>(r) * row);
    }
    model_->begin_step(batch_);
}

std::vector<std::span<std::byte>> elastic_gpt::trainable_state()
{
    return {std::as_writable_bytes(std::span<float>(params_.value)), std::as_writable_bytes(opt_.first_moments()),
            std::as_writable_bytes(opt_.second_moments()),
            std::as_writable_bytes(std::span<std::int64_t>(&opt_.step_count(), 1))};
}

activation<float> elastic_gpt::run_frozen(std::int64_t id, std::optional<activation<float>> from, int from_layers, int to_layers)
{
    if (!prefix_) throw std::logic_error("elastic_gpt::run_frozen: no layer is frozen in the current pipeline");
    const std::int64_t ids[1] = {id};
    return prefix_->run(data_->rows(ids), from ? std::move(*from) : activation<float>{}, from_layers, to_layers);
}

namespace {
double median_of(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}
} // namespace

unit_seconds measure_units(const config& cfg, std::int64_t seq_len, int threads)
{
    parameters<float> p(cfg);
    p.init(1);
    // A unit's times as a run sees them: `in_flight` one-row microbatches forwarded in order,
    // then sent back in reverse (as GPipe holds them), so that their activations and gradients
    // compete for the cache as in a pipeline. Timed on one warm row instead, a d_model 64 layer's
    // forward + backward ran 12 % faster than this, and the runs 11-19 % slower than forecast
    // (docs/elastic.md, "Predictions against measurements").
    constexpr int in_flight = 8;
    batch rows{in_flight, seq_len, std::vector<std::int32_t>(static_cast<std::size_t>(in_flight * seq_len)),
               std::vector<std::int32_t>(static_cast<std::size_t>(in_flight * seq_len))};
    for (std::size_t t = 0; t < rows.inputs.size(); ++t) {
        rows.inputs[t] = static_cast<std::int32_t>((t * 7 + 3) % static_cast<std::size_t>(cfg.vocab));
        rows.targets[t] = static_cast<std::int32_t>((t * 5 + 1) % static_cast<std::size_t>(cfg.vocab));
    }
    auto row = [&](int m) { return tpipe::unit{m, 0, m, m + 1, 0, seq_len}; };
    const activation<float> one_row{1, seq_len, std::vector<float>(static_cast<std::size_t>(seq_len * cfg.d_model), 0.5f)};
    unit_seconds s;
    auto best_of = [&](int l0, int l1, bool first, bool last, double& f, double& b) {
        part<float> q(p, l0, l1, first, last, threads);
        std::vector<double> fs, bs;
        for (int rep = 0; rep < 11; ++rep) {  // the median of 11: one preemption is longer than a unit
            q.begin(&rows);
            std::vector<activation<float>> ins(in_flight, first ? activation<float>{} : one_row);
            std::vector<activation<float>> grads(in_flight, last ? activation<float>{} : one_row);
            const auto t0 = std::chrono::steady_clock::now();
            for (int m = 0; m < in_flight; ++m) q.forward(row(m), std::move(ins[m]));
            const auto t1 = std::chrono::steady_clock::now();
            for (int m = in_flight - 1; m >= 0; --m) q.backward(row(m), std::move(grads[m]));
            const auto t2 = std::chrono::steady_clock::now();
            fs.push_back(std::chrono::duration<double>(t1 - t0).count() / in_flight);
            bs.push_back(std::chrono::duration<double>(t2 - t1).count() / in_flight);
        }
        f = median_of(std::move(fs));
        b = median_of(std::move(bs));
    };
    for (int l = 0; l <= cfg.layers; ++l) {
        double f = 0, b = 0;
        if (l < cfg.layers) best_of(l, l + 1, l == 0, false, f, b);
        else best_of(l, l, false, true, f, b);  // the tail
        s.forward.push_back(f);
        s.backward.push_back(b);
    }
    {  // AdamW's step, linear in the parameters, apportioned by unit (a tied head's are layer 0's)
        adamw<float> opt(p, adamw_options{});
        std::vector<double> steps;
        for (int rep = 0; rep < 5; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            opt.step(p);
            steps.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        std::vector<std::size_t> parameters;
        for (int l = 0; l <= cfg.layers; ++l) {
            const std::int64_t end = l < cfg.layers ? p.lay.frozen_end(l + 1) : p.lay.total;
            parameters.push_back(static_cast<std::size_t>(end - p.lay.frozen_end(l)));
        }
        tpipe::elastic::price_step(s, parameters, median_of(std::move(steps)));
    }
    return s;
}

std::vector<tpipe::table_latency> profile_units(const config& cfg, const batch& probe, const tpipe::profile_grid& grid,
                                                int threads)
{
    parameters<float> p(cfg);
    p.init(1);
    std::vector<int> cuts;  // one stage per layer, then the tail alone
    for (int l = 0; l <= cfg.layers; ++l) cuts.push_back(l);
    cuts.push_back(cfg.layers);
    pipelined_model<float> units(p, cfg.layers + 1, threads, cuts);
    return profile_parts(units, probe, grid).parts;
}

} // namespace gpt
