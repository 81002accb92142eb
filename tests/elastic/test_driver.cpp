// The elastic driver with a model of its own (not the GPT): a chain of scalar units y = w_i x
// with a squared loss. Elastic training -- freezing, a shorter pipeline, a new replica, the cache
// -- gives the weights a plain loop gives with the same freezing, replica split and samples.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "tpipe/elastic/thread_driver.hpp"

namespace {

// [snippet:user_model]
// A user's model for tpipe::elastic::thread_driver: units y = w[i] * x, then the loss
// 0.5 (y - target)^2 averaged over the batch; every unit but the last may freeze.
struct chain;

struct chain_stage {  // units [u0, u1) of one pipeline stage
    using input = std::vector<double>;
    using output = std::vector<double>;
    chain* m;
    int u0, u1;
    std::map<int, std::vector<std::vector<double>>> saved;  // per microbatch: each unit's input
    output forward(const tpipe::unit& u, input x);
    input backward(const tpipe::unit& u, output g);
    std::span<double> gradients();
};

struct chain {
    using stage_type = chain_stage;
    using frozen_output = std::vector<double>;  // one sample's value after the frozen units

    std::vector<double> w, grad;
    const std::vector<double>* x;  // the data set: sample k is x[k], its target 1.0
    int frozen = 0;
    double lr = 0.05, loss = 0;
    std::vector<double> in;  // this step's stage-0 inputs, one per row
    std::optional<tpipe::uniform_pipeline<chain_stage>> pipe;
    tpipe::io_for<tpipe::uniform_pipeline<chain_stage>> io_;

    chain(int units, const std::vector<double>& data) : w(static_cast<std::size_t>(units)), grad(w.size()), x(&data)
    {
        for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.9 + 0.05 * static_cast<double>(i);
        io_.source = [this](const tpipe::unit& u) {
            return std::vector<double>(in.begin() + u.row_begin, in.begin() + u.row_end);
        };
        io_.loss = [this](const tpipe::unit&, std::vector<double>&& y) {
            for (auto& v : y) {
                loss += 0.5 * (v - 1) * (v - 1) / static_cast<double>(in.size());
                v = (v - 1) / static_cast<double>(in.size());
            }
            return std::move(y);
        };
    }
    std::vector<double> unit_costs() const { return std::vector<double>(w.size(), 1.0); }
    int freezable_units() const { return static_cast<int>(w.size()) - 1; }
    tpipe::uniform_pipeline<chain_stage>& build(const tpipe::elastic::stage_request& r)
    {
        std::vector<chain_stage> stages;
        for (int s = 0; s < r.stages(); ++s) stages.push_back({this, r.cuts[s], r.cuts[s + 1], {}});
        return pipe.emplace(std::move(stages));
    }
    const auto& io() const { return io_; }
    void begin_step(std::span<const std::int64_t> ids, std::vector<frozen_output> outs)
    {
        in.clear();
        for (std::size_t r = 0; r < ids.size(); ++r) in.push_back(outs.empty() ? (*x)[ids[r]] : outs[r][0]);
        std::fill(grad.begin(), grad.end(), 0.0);
        loss = 0;
    }
    double finish_step() { return loss; }
    void optimizer_step()
    {
        for (std::size_t i = static_cast<std::size_t>(frozen); i < w.size(); ++i) w[i] -= lr * grad[i];
    }
    void freeze(int units) { frozen = units; }
    std::vector<std::span<std::byte>> trainable_state() { return {std::as_writable_bytes(std::span<double>(w))}; }
    frozen_output run_frozen(std::int64_t id, std::optional<frozen_output> from, int lo, int hi)
    {
        double v = from ? (*from)[0] : (*x)[static_cast<std::size_t>(id)];
        for (int i = lo; i < hi; ++i) v *= w[static_cast<std::size_t>(i)];
        return {v};
    }
};

chain_stage::output chain_stage::forward(const tpipe::unit& u, input v)
{
    auto& ins = saved[u.microbatch];
    for (int i = u0; i < u1; ++i) {
        ins.push_back(v);
        for (auto& e : v) e *= m->w[static_cast<std::size_t>(i)];
    }
    return v;
}
chain_stage::input chain_stage::backward(const tpipe::unit& u, output g)
{
    auto ins = std::move(saved.at(u.microbatch));
    saved.erase(u.microbatch);
    for (int i = u1 - 1; i >= u0; --i)
        for (std::size_t r = 0; r < g.size(); ++r) {
            m->grad[static_cast<std::size_t>(i)] += ins[static_cast<std::size_t>(i - u0)][r] * g[r];
            g[r] *= m->w[static_cast<std::size_t>(i)];
        }
    return g;
}
std::span<double> chain_stage::gradients() { return std::span<double>(m->grad).subspan(static_cast<std::size_t>(u0), static_cast<std::size_t>(u1 - u0)); }
static_assert(tpipe::elastic::freezable_model<chain>);
// [/snippet]

} // namespace

TEST_CASE("elastic driver: a user model trains like a plain loop with the same freezing and replicas", "[elastic][driver]")
{
    std::vector<double> data(32);
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = 0.5 + 0.03 * static_cast<double>(k % 11);
    const int units = 5;  // 4 freezable, the last (the loss's unit) always trains
    // [snippet:user_driver]
    tpipe::elastic::driver_options o;
    o.devices = 2;                       // start as a 2-stage pipeline
    o.batch = 8;                         // samples per step over all replicas
    o.steps = 16;
    o.freeze_every = 4;                  // re-plan every 4 steps (default: every epoch)
    o.threads = 2;
    o.measured = {std::vector<double>(units, 1.0), std::vector<double>(units, 2.0)};  // per unit, s/sample
    o.freeze = [](int interval, int) { return interval == 0 ? 0 : interval == 1 ? 2 : 3; };
    tpipe::elastic::thread_driver<chain> driver([&] { return std::make_unique<chain>(units, data); },
                                                static_cast<std::int64_t>(data.size()), o);
    const auto report = driver.run();
    // [/snippet]
    REQUIRE(report.intervals.size() == 4);
    REQUIRE(report.intervals[0].plan.stages == 2);
    REQUIRE(report.intervals[0].plan.replicas == 1);
    REQUIRE(report.intervals[2].plan.frozen == 3);
    REQUIRE(report.intervals[2].plan.stages == 1);   // 1 active unit and the loss's: one stage
    REQUIRE(report.intervals[2].plan.replicas == 2);  // the freed device is a replica
    REQUIRE(report.replicas_identical);
    REQUIRE(report.replans_kept_weights);
    REQUIRE(report.intervals[2].rows_extended > 0);  // 2 -> 3 ran only unit 2 on cached outputs
    REQUIRE(report.intervals[3].rows_cached == 32);  // epoch 3: every sample from the cache

    // The plain loop: the same samples, replicas' gradients averaged, frozen units untouched.
    std::vector<double> w(units);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = 0.9 + 0.05 * static_cast<double>(i);
    const std::vector<double> initial = w;
    tpipe::elastic::epoch_sampler sampler({.samples = static_cast<std::int64_t>(data.size()), .batch = o.batch, .seed = o.seed});
    for (const auto& iv : report.intervals) {
        const int F = iv.plan.frozen, D = iv.plan.replicas;
        for (std::int64_t step = iv.first_step; step < iv.first_step + iv.steps; ++step) {
            std::vector<double> g(w.size(), 0.0);
            for (int d = 0; d < D; ++d) {
                const auto ids = sampler.shard(step, d, D);
                for (auto id : ids) {
                    std::vector<double> in{data[static_cast<std::size_t>(id)]};
                    for (int i = 0; i < units; ++i) in.push_back(in.back() * w[static_cast<std::size_t>(i)]);
                    double dy = (in.back() - 1) / static_cast<double>(ids.size()) / D;
                    for (int i = units - 1; i >= 0; --i) {
                        g[static_cast<std::size_t>(i)] += in[static_cast<std::size_t>(i)] * dy;
                        dy *= w[static_cast<std::size_t>(i)];
                    }
                }
            }
            for (int i = F; i < units; ++i) w[static_cast<std::size_t>(i)] -= 0.05 * g[static_cast<std::size_t>(i)];
        }
    }
    const auto& trained = driver.replica(0).w;
    for (int i = 0; i < units; ++i) REQUIRE(trained[static_cast<std::size_t>(i)] == Approx(w[static_cast<std::size_t>(i)]).epsilon(1e-12));
    for (int i = 0; i < 2; ++i) REQUIRE(trained[static_cast<std::size_t>(i)] != initial[static_cast<std::size_t>(i)]);  // trained before freezing
    REQUIRE(trained[3] != initial[3]);
    REQUIRE(driver.replica(1).w == trained);
}

TEST_CASE("elastic driver: refuses to plan without unit times or with a batch the devices cannot share", "[elastic][driver]")
{
    std::vector<double> data(16, 1.0);
    tpipe::elastic::driver_options o;
    o.devices = 2;
    o.batch = 4;
    o.steps = 1;
    tpipe::elastic::thread_driver<chain> d([&] { return std::make_unique<chain>(3, data); }, 16, o);
    REQUIRE_THROWS_WITH(d.run(), Catch::Contains("measured unit times for 0 forward"));
    o.measured = {std::vector<double>(3, 1.0), std::vector<double>(3, 1.0)};
    o.batch = 5;
    tpipe::elastic::thread_driver<chain> e([&] { return std::make_unique<chain>(3, data); }, 15, o);
    REQUIRE_THROWS_WITH(e.run(), Catch::Contains("must be a multiple of the 2 devices"));
}

TEST_CASE("elastic driver: a stop asked for mid-interval ends the run there, with the weights of a run of that length",
          "[elastic][driver]")
{
    std::vector<double> data(32);
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = 0.5 + 0.03 * static_cast<double>(k % 11);
    const int units = 5;
    tpipe::elastic::driver_options o;
    o.devices = 2;
    o.batch = 8;
    o.steps = 16;
    o.freeze_every = 4;
    o.threads = 2;
    o.measured = {std::vector<double>(units, 1.0), std::vector<double>(units, 2.0)};
    o.freeze = [](int interval, int) { return interval == 0 ? 0 : 2; };
    std::vector<std::int64_t> asked;
    o.stop = [&](std::int64_t done) {
        asked.push_back(done);
        return done == 6;  // e.g. SIGTERM seen after the 6th step: inside the second interval
    };
    tpipe::elastic::thread_driver<chain> stopped([&] { return std::make_unique<chain>(units, data); },
                                                 static_cast<std::int64_t>(data.size()), o);
    const auto report = stopped.run();
    REQUIRE(report.stopped_after == 6);
    REQUIRE(asked == std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6});  // before every step, then no more
    REQUIRE(report.intervals.size() == 2);
    REQUIRE(report.intervals[0].steps == 4);
    REQUIRE(report.intervals[1].steps == 2);

    o.stop = {};
    o.steps = 6;  // the same run, told its length
    tpipe::elastic::thread_driver<chain> shorter([&] { return std::make_unique<chain>(units, data); },
                                                 static_cast<std::int64_t>(data.size()), o);
    const auto full = shorter.run();
    REQUIRE(full.stopped_after == -1);
    REQUIRE(full.intervals.size() == 2);
    REQUIRE(stopped.replica(0).w == shorter.replica(0).w);
    REQUIRE(stopped.replica(1).w == shorter.replica(1).w);

    // Asked to stop before the first step: nothing is trained and no interval is reported.
    o.steps = 16;
    o.stop = [](std::int64_t) { return true; };
    tpipe::elastic::thread_driver<chain> none([&] { return std::make_unique<chain>(units, data); },
                                              static_cast<std::int64_t>(data.size()), o);
    const auto empty = none.run();
    REQUIRE(empty.stopped_after == 0);
    REQUIRE(empty.intervals.empty());
}
