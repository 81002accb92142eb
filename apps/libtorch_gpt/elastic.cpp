// train_libtorch_gpt --elastic: the libtorch GPT as a tpipe::libtorch::freezable_sequential,
// trained by tpipe's elastic drivers, and the plain libtorch run it is checked against (see
// training.hpp).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include <torch/torch.h>

#include <tpipe/adapters/libtorch/freezable_sequential.hpp>
#include <tpipe/adapters/libtorch/unit_times.hpp>
#include <tpipe/elastic/measure_units.hpp>
#include <tpipe/elastic/plan_inputs_file.hpp>
#include <tpipe/elastic/sampler.hpp>
#include <tpipe/elastic/thread_driver.hpp>

#ifdef TPIPE_LIBTORCH_GPT_MPI
#include <tpipe/mpi/elastic_driver.hpp>

#include "../common/links.hpp"
#endif

#include "corpus.hpp"
#include "parts.hpp"

namespace libtorch_gpt {

namespace {

namespace F = torch::nn::functional;
using tpipe::libtorch::freezable_sequential;

// [snippet:elastic-parts]
//! The GPT as the elastic drivers' model: its modules are the units, the loss is the summed
//! cross-entropy (the model divides by the replica's token count).
freezable_sequential::parts parts_of(const options& o, const corpus& data, const tpipe::elastic::unit_seconds& u)
{
    std::vector<double> costs;  // the partitioner's weights: each module's measured time
    for (std::size_t m = 0; m < u.forward.size(); ++m) costs.push_back(u.forward[m] + u.backward[m]);
    return {.model = make_gpt(config_of(o), o.seed),
            .adamw = torch::optim::AdamWOptions(o.lr),
            .samples = [&data, n = o.seq_len](std::span<const std::int64_t> ids) { return data.rows(ids, n); },
            .loss = [](const torch::Tensor& y, const torch::Tensor& t) {
                return F::cross_entropy(y.reshape({-1, y.size(-1)}), t.reshape({-1}),
                                        F::CrossEntropyFuncOptions().reduction(torch::kSum));
            },
            .unit_costs = std::move(costs),
            .tokens = o.seq_len};
}
// [/snippet]

//! The inputs of the first batch of windows: what the modules are timed on.
torch::Tensor first_batch(const options& o, const corpus& data)
{
    std::vector<std::int64_t> ids(static_cast<std::size_t>(o.batch));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
    return data.rows(ids, o.seq_len).first;
}

//! Each module's forward and backward seconds per sample on the first batch of windows, and its
//! share of AdamW's step and of the gradients' all-reduce: tpipe::elastic::measure_units on a
//! scratch model (it steps the optimizer), whose stages are the ones the drivers build.
tpipe::elastic::unit_seconds measure(const options& o, const corpus& data)
{
    const auto modules = static_cast<std::size_t>(o.layers) + 2;  // embedding, blocks, head
    const tpipe::elastic::unit_seconds equal{.forward = std::vector<double>(modules, 1.0),
                                             .backward = std::vector<double>(modules, 0.0)};
    freezable_sequential scratch(parts_of(o, data, equal));
    std::vector<std::int64_t> ids(static_cast<std::size_t>(o.batch));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>(i);
    return tpipe::elastic::measure_units(scratch, ids, {.seq_len = o.seq_len, .repeats = 5, .threads = 1});
}

//! TeraPipe inside the elastic pipeline: each module's token latency table, profiled on the
//! first batch of windows.
tpipe::elastic::token_slicing profile(const options& o, const corpus& data)
{
    const std::int64_t g = o.terapipe_granularity;
    if (o.seq_len % g != 0)
        throw tpipe::invalid_argument("--granularity " + std::to_string(g) + " must divide --seq-len " +
                                      std::to_string(o.seq_len));
    auto model = make_gpt(config_of(o), o.seed);
    return {.units = tpipe::libtorch::profile_units(model, first_batch(o, data),
                                                    tpipe::token_profile_grid(o.batch, o.seq_len, g)),
            .granularity = g};
}

//! The planner's inputs in `d`: replayed from o.plan_from (every process reads the file, so that a
//! bad one is refused on every process), else measured and profiled here when `measures`.
void plan_inputs(const options& o, const corpus& data, tpipe::elastic::driver_options& d, bool measures)
{
    if (!o.plan_from.empty()) {
        tpipe::elastic::replay_plan_inputs(o.plan_from, d, static_cast<std::size_t>(o.layers) + 2, o.terapipe_granularity);
        return;
    }
    if (!measures) return;
    d.measured = measure(o, data);
    if (o.terapipe_granularity > 0 && !d.slicing) d.slicing = profile(o, data);
}

} // namespace

std::int64_t elastic_samples(const options& o)
{
    return corpus(o.data, o.seed).windows(o.seq_len, o.batch);
}

elastic_result train_elastic(const options& o, tpipe::elastic::driver_options d,
                             const std::function<void(const tpipe::elastic::interval_report&)>& on_interval)
{
    if (o.threads > 0) torch::set_num_threads(o.threads);
    const corpus data(o.data, o.seed);
    elastic_result r;
    r.samples = data.windows(o.seq_len, o.batch);
    d.batch = o.batch;
    d.seq_len = o.seq_len;
    d.seed = o.seed;
    if (o.transport == "mpi") {
#ifdef TPIPE_LIBTORCH_GPT_MPI
        // Plans depend on the unit times (and the costs made of them): every process takes process 0's.
        // Bounded like the driver's collectives: the others wait on while process 0 measures, for as
        // long as it answers (communicator::busy), and end, naming it, if it stops.
        auto world = tpipe::mpi::communicator::world();
        world.set_watchdog(d.watchdog);
        {
            const auto busy = world.rank() == 0 ? world.busy("measuring the layers for the elastic plan") : tpipe::mpi::busy_section();
            plan_inputs(o, data, d, world.rank() == 0);
        }
        tpipe::mpi::share_plan_inputs(world, d, static_cast<std::size_t>(o.layers) + 2);
        if (!o.record_plan.empty() && world.rank() == 0) tpipe::elastic::record_plan_inputs(o.record_plan, d);
        tpipe::mpi::elastic_driver<freezable_sequential> driver(
            std::make_unique<freezable_sequential>(parts_of(o, data, d.measured)), r.samples, d, 1,
            tpipe::mpi::communicator::world(), tpipe_examples::link_maker_of(o.link));
        r.speaks = driver.process() == 0;
        const std::function<void(const tpipe::elastic::interval_report&)> none;
        static_cast<tpipe::elastic::run_report&>(r) = driver.run(r.speaks ? on_interval : none);
        r.weights = flatten(*driver.model().model());
#else
        throw tpipe::invalid_argument("--transport mpi: built without MPI (configure with -DTPIPE_ENABLE_MPI=ON)");
#endif
    } else if (o.transport == "threads") {
        plan_inputs(o, data, d, true);
        if (!o.record_plan.empty()) tpipe::elastic::record_plan_inputs(o.record_plan, d);
        // [snippet:elastic-driver]
        tpipe::elastic::thread_driver<freezable_sequential> driver(
            [&] { return std::make_unique<freezable_sequential>(parts_of(o, data, d.measured)); }, r.samples, d);
        static_cast<tpipe::elastic::run_report&>(r) = driver.run(on_interval);
        r.weights = flatten(*driver.replica(0).model());  // every replica holds the trained model
        // [/snippet]
    } else {
        throw tpipe::invalid_argument("--elastic runs over --transport threads or mpi, not '" + o.transport + "'");
    }
    r.weights_fnv = checksum_of(r.weights);
    return r;
}

double elastic_check_tolerance(const std::vector<tpipe::elastic::interval_report>& intervals)
{
    double regrouped = 0;  // partial sums added, over every step
    for (const auto& r : intervals) {
        std::size_t units = static_cast<std::size_t>(r.plan.microbatches);
        if (!r.plan.slices.empty()) {
            units = 0;
            for (const auto& m : r.plan.slices) units += m.tokens.size();
        }
        regrouped += static_cast<double>(r.steps) * static_cast<double>(units) * r.plan.replicas;
    }
    return static_cast<double>(std::numeric_limits<float>::epsilon()) * std::max(regrouped, 1.0);
}

std::vector<double> frozen_reference(const options& o, const std::vector<tpipe::elastic::interval_report>& intervals,
                                     std::vector<double>& interval_losses)
{
    const corpus data(o.data, o.seed);
    const std::int64_t samples = data.windows(o.seq_len, o.batch);
    auto model = make_gpt(config_of(o), o.seed);
    torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(o.lr));
    tpipe::elastic::epoch_sampler sampler({.samples = samples, .batch = o.batch, .seed = o.seed});
    std::size_t frozen = 0;
    for (const auto& r : intervals) {
        for (; frozen < static_cast<std::size_t>(r.plan.frozen); ++frozen)
            for (auto& p : model->ptr(frozen)->parameters()) {  // trains no more: AdamW skips it
                p.requires_grad_(false);
                p.mutable_grad() = torch::Tensor();
            }
        const int D = r.plan.replicas;
        double sum = 0;
        for (std::int64_t step = r.first_step; step < r.first_step + r.steps; ++step) {
            opt.zero_grad();
            for (int k = 0; k < D; ++k) {
                const auto ids = sampler.shard(step, k, D);
                auto [inputs, targets] = data.rows(ids, o.seq_len);
                auto y = model->forward(inputs);
                auto loss = F::cross_entropy(y.reshape({-1, y.size(-1)}), targets.reshape({-1}));
                (loss / D).backward();
                sum += loss.item<double>() / D;
            }
            opt.step();
        }
        interval_losses.push_back(sum / static_cast<double>(r.steps));
    }
    return flatten(*model);
}

} // namespace libtorch_gpt
