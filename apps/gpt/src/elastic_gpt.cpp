#include "gpt/elastic_gpt.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tpipe/elastic/measure_units.hpp>

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


unit_seconds measure_units(const config& cfg, std::int64_t seq_len, int threads)
{
    // The library's measurement (tpipe/elastic/measure_units.hpp), as for any model: on a scratch
    // replica, 8 samples as one-row microbatches in flight (forwards in order, backwards in
    // reverse, as GPipe holds them, so that their activations and gradients compete for the
    // cache as in a pipeline), then as one microbatch of 8 rows (each microbatch's fixed part),
    // then AdamW's step, apportioned by each unit's parameters, and their all-reduce.
    constexpr std::int64_t in_flight = 8;
    std::string text(static_cast<std::size_t>((in_flight + 1) * seq_len + 1), ' ');
    for (std::size_t t = 0; t < text.size(); ++t) text[t] = static_cast<char>('a' + (t * 7 + 3) % 26);
    config c = cfg;
    c.seq_len = seq_len;
    const window_dataset data(text, seq_len, in_flight);
    elastic_gpt scratch(c, data, adamw_options{}, 1);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(in_flight));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
    return tpipe::elastic::measure_units(scratch, ids, {.seq_len = seq_len, .repeats = 11, .threads = threads});
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
