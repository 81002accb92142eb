// The libtorch adapter: the example GPT trained pipelined equals plain libtorch; refusals at the
// stage boundary and in the payload header; gradients() all-reduced by tpipe::data_parallel;
// freezable_sequential (a second model besides the GPT) trained by the elastic thread driver.
#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#undef CHECK  // Debian's libtorch brings glog's CHECK; the tests use Catch's
#include <catch2/catch.hpp>

#include <tpipe/adapters/libtorch.hpp>
#include <tpipe/comm/thread_communicator.hpp>
#include <tpipe/elastic/sampler.hpp>
#include <tpipe/elastic/thread_driver.hpp>
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/exec/run.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "gpt.hpp"
#include "training.hpp"

#include "../elastic/rows_free_unit.hpp"

namespace {

libtorch_gpt::options small(int stages, std::string schedule, std::string slicer, std::string transport = "threads")
{
    libtorch_gpt::options o;
    o.layers = 3;
    o.d_model = 32;
    o.heads = 2;
    o.seq_len = 16;
    o.batch = 4;
    o.steps = 3;
    o.stages = stages;
    o.schedule = std::move(schedule);
    o.slicer = std::move(slicer);
    o.transport = std::move(transport);
    o.threads = 1;
    o.data = TPIPE_TEST_CORPUS;
    return o;
}

using tpipe::libtorch::describe;
using tpipe::libtorch::module_stage;

} // namespace

TEST_CASE("the libtorch GPT trained pipelined equals plain libtorch: losses and weights within 1e-5", "[libtorch]")
{
    const libtorch_gpt::result plain = libtorch_gpt::train(small(2, "1f1b", "microbatch:1", "none"));
    REQUIRE(plain.losses.size() == 3);
    REQUIRE(plain.losses.back() < plain.losses.front());  // it trains
    const auto [stages, schedule, slicer] = GENERATE(table<int, std::string, std::string>({
        {2, "1f1b", "microbatch:4"},
        {3, "1f1b", "microbatch:2"},
        {2, "zb-h1", "microbatch:4"},
        {3, "zb-h1", "microbatch:3"},
        {2, "1f1b", "tokens:8,4,4"},     // token slices: attention reads the K/V cache
        {3, "zb-h1", "tokens:4,4,8"},
        {3, "1f1b", "grid:2:6,10"},      // rows and tokens
        {2, "zb-h1", "grid:2:4,8,4"},
    }));
    CAPTURE(stages, schedule, slicer);
    const libtorch_gpt::result piped = libtorch_gpt::train(small(stages, schedule, slicer));
    REQUIRE(piped.losses.size() == plain.losses.size());
    for (std::size_t s = 0; s < plain.losses.size(); ++s) {
        CAPTURE(s, piped.losses[s], plain.losses[s]);
        CHECK(std::abs(piped.losses[s] - plain.losses[s]) <= 1e-5 * std::abs(plain.losses[s]));
    }
    const double weights = libtorch_gpt::relative_difference(piped.weights, plain.weights);
    CAPTURE(weights);
    CHECK(weights <= 1e-5);
    // The check can fail: another seed's weights are far away.
    auto other = small(2, "1f1b", "microbatch:1", "none");
    other.seed = 2;
    other.steps = 1;
    CHECK(libtorch_gpt::relative_difference(libtorch_gpt::train(other).weights, plain.weights) > 1e-2);
}

TEST_CASE("a stage whose input does not fit what the stage before produced is refused at the boundary", "[libtorch]")
{
    torch::manual_seed(0);
    torch::nn::Sequential model(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Linear(32, 4));
    tpipe::uniform_pipeline<module_stage> pipe(tpipe::libtorch::cut(model, {0, 2, 3}));
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{.ranks = 2}, tpipe::microbatches(2));
    tpipe::cpu_engine engine(2);
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit& u) { return torch::randn({u.rows(), 8}); };
    io.output_grad = [](const tpipe::unit&, torch::Tensor&& y) { return torch::ones_like(y); };
    try {
        tpipe::run(pipe, prog, engine, io);
        FAIL("the run should have failed");
    } catch (const tpipe::execution_error& e) {
        const std::string what = e.what();
        CAPTURE(what);
        CHECK(what.find("stage 1 (modules [2, 3)") != std::string::npos);
        CHECK(what.find("takes [..., 32] floating point") != std::string::npos);
        CHECK(what.find("stage 0 (modules [0, 2)") != std::string::npos);
        CHECK(what.find("[1, 16] Float") != std::string::npos);
        CHECK(e.stage() == 1);
        CHECK_THROWS_AS(std::rethrow_exception(e.cause()), tpipe::invalid_argument);  // ours, not libtorch's
    }
}

TEST_CASE("cut refuses cuts that do not cover the Sequential", "[libtorch]")
{
    torch::nn::Sequential model(torch::nn::Linear(4, 4), torch::nn::Linear(4, 4));
    CHECK_THROWS_WITH(tpipe::libtorch::cut(model, {0, 1}), Catch::Contains("rise strictly to the Sequential's 2"));
    CHECK_THROWS_AS(tpipe::libtorch::cut(model, {0, 1, 1, 2}), tpipe::invalid_argument);
}

TEST_CASE("a tensor's payload header carries dtype and shape, and refuses too many dimensions", "[libtorch]")
{
    using traits = tpipe::payload_traits<torch::Tensor>;
    const torch::Tensor t = torch::arange(24, torch::kFloat64).reshape({2, 3, 4});
    const traits::header h = traits::header_of(t);
    torch::Tensor r = traits::make(h);
    REQUIRE(r.sizes().equals(t.sizes()));
    REQUIRE(r.scalar_type() == torch::kFloat64);
    const auto from = traits::bytes(t);
    auto to = traits::bytes(r);
    REQUIRE(from.size() == to.size());
    std::copy(from.begin(), from.end(), to.begin());
    CHECK(torch::equal(r, t));
    CHECK_FALSE(traits::make(traits::header_of(torch::Tensor())).defined());
    const std::vector<std::int64_t> nine(9, 1);
    CHECK_THROWS_WITH(traits::header_of(torch::zeros(nine)), Catch::Contains("has 9 dimensions; a payload carries at most 8"));
    CHECK_THROWS_WITH(traits::bytes(t.transpose(0, 2)), Catch::Contains("not a contiguous CPU tensor"));
}

TEST_CASE("gradients() lets data_parallel average the module's gradients over replicas", "[libtorch]")
{
    // Two replicas (same weights, different data) pipelined over 2 stages each, on threads.
    constexpr int D = 2;
    auto make = [] {
        torch::manual_seed(3);
        return torch::nn::Sequential(torch::nn::Linear(3, 5), torch::nn::Tanh(), torch::nn::Linear(5, 2));
    };
    auto data = [](int d) { return torch::arange(12, torch::kFloat).reshape({4, 3}) * (d + 1) / 10.0; };
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{.ranks = 2},
                                                           tpipe::microbatch_slicer{2}.scheme({.rows = 4, .seq_len = 1}));
    tpipe::cpu_engine engine(2 * D);
    std::vector<tpipe::thread_group> groups;  // one per stage: its replicas
    for (int s = 0; s < 2; ++s) groups.emplace_back(D);
    std::vector<torch::nn::Sequential> models;
    std::vector<std::unique_ptr<tpipe::uniform_pipeline<module_stage>>> pipes;
    std::vector<std::vector<tpipe::thread_communicator>> members(D);
    std::vector<std::unique_ptr<tpipe::data_parallel<tpipe::thread_communicator>>> dps;
    for (int d = 0; d < D; ++d) {
        models.push_back(make());
        pipes.push_back(std::make_unique<tpipe::uniform_pipeline<module_stage>>(tpipe::libtorch::cut(models[d], {0, 2, 3})));
        for (auto& g : groups) members[d].push_back(g.member(d));
        dps.push_back(std::make_unique<tpipe::data_parallel<tpipe::thread_communicator>>(
            *pipes[d], std::vector<tpipe::thread_communicator*>{&members[d][0], &members[d][1]}));
    }
    std::vector<std::exception_ptr> failed(D);
    std::vector<std::thread> threads;
    for (int d = 0; d < D; ++d)
        threads.emplace_back([&, d] {
            try {
                tpipe::run_options opts;
                opts.device_of_rank = {2 * d, 2 * d + 1};
                opts.after_backward = dps[d]->hook();
                tpipe::io_for<tpipe::uniform_pipeline<module_stage>> io;
                const torch::Tensor x = data(d);
                io.source = [&](const tpipe::unit& u) { return x.slice(0, u.row_begin, u.row_end); };
                io.output_grad = [](const tpipe::unit&, torch::Tensor&& y) { return 2 * y; };  // d(sum y^2)/dy
                tpipe::run(*pipes[d], prog, engine, io, opts);
            } catch (...) {
                failed[d] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& f : failed)
        if (f) std::rethrow_exception(f);
    // Expected: the mean over replicas of each replica's own gradient, computed plainly.
    std::vector<torch::Tensor> expected;
    for (int d = 0; d < D; ++d) {
        auto m = make();
        m->forward(data(d)).pow(2).sum().backward();
        auto ps = m->parameters();
        for (std::size_t i = 0; i < ps.size(); ++i) {
            if (d == 0) expected.push_back(ps[i].grad() / D);
            else expected[i] += ps[i].grad() / D;
        }
    }
    for (int d = 0; d < D; ++d) {
        auto ps = models[d]->parameters();
        for (std::size_t i = 0; i < ps.size(); ++i) {
            CAPTURE(d, i, describe(ps[i].grad()), ps[i].grad().flatten().slice(0, 0, 4), expected[i].flatten().slice(0, 0, 4));
            CHECK(torch::allclose(ps[i].grad(), expected[i], 1e-5, 1e-6));
        }
    }
}

namespace {

// A second model of freezable_sequential besides the GPT: an MLP regressing 2 outputs of 3
// inputs, its 5 modules the units.
struct mlp_data {
    torch::Tensor x = torch::linspace(-1, 1, 48).reshape({16, 3});
    torch::Tensor y = torch::stack({x.sum(1).sin(), (x * x).sum(1)}, 1);
};

tpipe::libtorch::freezable_sequential::parts mlp_parts(const mlp_data& data)
{
    torch::manual_seed(3);
    return {.model = torch::nn::Sequential(torch::nn::Linear(3, 8), torch::nn::Tanh(), torch::nn::Linear(8, 8),
                                           torch::nn::Tanh(), torch::nn::Linear(8, 2)),
            .adamw = torch::optim::AdamWOptions(0.05),
            .samples = [&data](std::span<const std::int64_t> ids) {
                const auto at = torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end()));
                return std::pair{data.x.index_select(0, at), data.y.index_select(0, at)};
            },
            .loss = [](const torch::Tensor& out, const torch::Tensor& t) { return (out - t).pow(2).sum(); },
            .unit_costs = std::vector<double>(5, 1.0)};
}

//! The same MLP with one 8 x 8 Linear used twice, as modules 2 and 4 (tied, like an embedding and
//! its LM head): 7 modules.
tpipe::libtorch::freezable_sequential::parts tied_mlp_parts(const mlp_data& data)
{
    auto p = mlp_parts(data);
    torch::manual_seed(3);
    torch::nn::Linear shared(8, 8);
    p.model = torch::nn::Sequential(torch::nn::Linear(3, 8), torch::nn::Tanh(), shared, torch::nn::Tanh(), shared,
                                    torch::nn::Tanh(), torch::nn::Linear(8, 2));
    p.unit_costs = std::vector<double>(7, 1.0);
    return p;
}

//! 2 devices, 3 intervals of 3 steps on 16 samples: none of the `modules` frozen, then 2, then
//! `last_frozen`; measured unit times (1 forward, 2 backward) so that the plans do not depend on
//! the machine.
tpipe::elastic::driver_options mlp_options(int modules, int last_frozen)
{
    tpipe::elastic::driver_options o;
    o.devices = 2;
    o.batch = 4;
    o.steps = 9;
    o.freeze_every = 3;
    o.threads = 2;
    o.measured = {std::vector<double>(static_cast<std::size_t>(modules), 1.0),
                  std::vector<double>(static_cast<std::size_t>(modules), 2.0)};
    o.freeze = [last_frozen](int interval, int) { return interval == 0 ? 0 : interval == 1 ? 2 : last_frozen; };
    return o;
}

torch::Tensor flat(const torch::nn::Sequential& m)
{
    std::vector<torch::Tensor> v;
    for (const auto& w : m->parameters()) v.push_back(w.detach().reshape({-1}));
    return torch::cat(v);
}

//! Plain libtorch through the elastic run's intervals: the same freezing (a module's parameters,
//! shared ones included, stop training), each step the mean of the replicas' mean-loss gradients.
torch::Tensor plain_libtorch(tpipe::libtorch::freezable_sequential::parts p, const tpipe::elastic::run_report& report,
                             std::uint64_t seed)
{
    std::vector<torch::Tensor> once;  // libtorch's parameters() lists a shared module's tensors at each use
    for (const auto& w : p.model->parameters())
        if (std::none_of(once.begin(), once.end(), [&](const torch::Tensor& o) { return o.is_same(w); })) once.push_back(w);
    torch::optim::AdamW opt(once, p.adamw);
    tpipe::elastic::epoch_sampler sampler({.samples = 16, .batch = 4, .seed = seed});
    std::size_t frozen = 0;
    for (const auto& r : report.intervals) {
        for (; frozen < static_cast<std::size_t>(r.plan.frozen); ++frozen)
            for (auto& w : p.model->ptr(frozen)->parameters()) {
                w.requires_grad_(false);
                w.mutable_grad() = torch::Tensor();
            }
        for (std::int64_t step = r.first_step; step < r.first_step + r.steps; ++step) {
            opt.zero_grad();
            for (int d = 0; d < r.plan.replicas; ++d) {
                const auto ids = sampler.shard(step, d, r.plan.replicas);
                auto [x, t] = p.samples(ids);
                (p.loss(p.model->forward(x), t) / static_cast<double>(t.numel() * r.plan.replicas)).backward();
            }
            opt.step();
        }
    }
    return flat(p.model);
}

} // namespace

TEST_CASE("freezable_sequential: an MLP trained by the elastic thread driver equals plain libtorch with the same "
          "freezing and replica split",
          "[libtorch][elastic]")
{
    const mlp_data data;
    const auto o = mlp_options(5, 4);
    tpipe::elastic::thread_driver<tpipe::libtorch::freezable_sequential> driver(
        [&] { return std::make_unique<tpipe::libtorch::freezable_sequential>(mlp_parts(data)); }, 16, o);
    const auto report = driver.run();
    REQUIRE(report.intervals.size() == 3);
    CHECK(report.intervals.back().plan.frozen == 4);
    CHECK(report.intervals.back().plan.replicas == 2);  // the freed device became a replica
    CHECK(report.replicas_identical);
    CHECK(report.replans_kept_weights);
    const auto got = flat(driver.replica(0).model()), want = plain_libtorch(mlp_parts(data), report, o.seed);
    CHECK((got - want).norm().item<double>() <= 1e-5 * want.norm().item<double>());
    CHECK(!torch::equal(want, flat(mlp_parts(data).model)));  // it trained
}

TEST_CASE("freezable_sequential: a tensor two modules share trains on two stages and freezes with the first module, "
          "as in plain libtorch",
          "[libtorch][elastic]")
{
    const mlp_data data;
    const auto o = mlp_options(7, 3);
    tpipe::elastic::thread_driver<tpipe::libtorch::freezable_sequential> driver(
        [&] { return std::make_unique<tpipe::libtorch::freezable_sequential>(tied_mlp_parts(data)); }, 16, o);
    const auto report = driver.run();
    REQUIRE(report.intervals.size() == 3);
    const auto& first = report.intervals.front();  // modules 2 and 4 on different stages: a tied gradient
    REQUIRE(first.plan.stages == 2);
    REQUIRE(first.stage_cuts.size() == 3);
    CHECK(first.stage_cuts[1] > 2);
    CHECK(first.stage_cuts[1] <= 4);
    CHECK(report.intervals.back().plan.frozen == 3);  // module 2 froze, and module 4 (the same Linear) with it
    CHECK(report.replicas_identical);
    CHECK(report.replans_kept_weights);
    // A shared Linear that kept training after it froze (3 steps at lr 0.05) would be far outside this.
    const auto got = flat(driver.replica(0).model()), want = plain_libtorch(tied_mlp_parts(data), report, o.seed);
    CHECK((got - want).norm().item<double>() <= 1e-5 * want.norm().item<double>());
}

TEST_CASE("freezable_sequential refuses unit costs that are not one per module, and a freeze that would thaw",
          "[libtorch][elastic]")
{
    const mlp_data data;
    auto costs = mlp_parts(data);
    costs.unit_costs = {1, 2};
    CHECK_THROWS_WITH(tpipe::libtorch::freezable_sequential(costs), Catch::Contains("2 unit costs for 5 modules"));
    tpipe::libtorch::freezable_sequential m(mlp_parts(data));
    m.freeze(2);
    CHECK_THROWS_WITH(m.freeze(1), Catch::Contains("2 modules are frozen and 4 may freeze; the count only grows"));
    CHECK_THROWS_WITH(m.freeze(5), Catch::Contains("the count only grows, up to that"));
}

TEST_CASE("elastic libtorch training with TeraPipe token slices equals plain libtorch with the same freezing and "
          "replica split",
          "[libtorch][elastic][terapipe]")
{
    auto o = small(2, "1f1b", "microbatch:1");
    o.terapipe_granularity = 4;
    tpipe::elastic::driver_options d;
    d.devices = 2;
    d.steps = 9;
    d.freeze_every = 3;
    d.threads = 2;
    d.freeze = [](int interval, int) { return interval == 0 ? 0 : interval == 1 ? 1 : 3; };
    tpipe::elastic::token_slicing t;
    t.granularity = 4;
    for (int u = 0; u < o.layers + 2; ++u) t.units.push_back(tpipe_test::rows_free_unit());
    d.slicing = t;
    const auto r = libtorch_gpt::train_elastic(o, d, {});
    REQUIRE(r.intervals.size() == 3);
    CHECK(r.intervals[0].plan.stages == 2);
    CHECK(r.intervals[0].units.max_slices() > 1);  // token slices in the 2-stage pipeline
    CHECK(!r.intervals[0].plan.slices.empty());
    CHECK(r.intervals[1].plan.frozen == 1);
    CHECK(r.intervals[1].units.max_slices() > 1);  // the frozen prefix's outputs feed the slices
    CHECK(r.replicas_identical);
    std::vector<double> losses, ref_losses;
    for (const auto& i : r.intervals) losses.push_back(i.mean_loss);
    const auto ref = libtorch_gpt::frozen_reference(o, r.intervals, ref_losses);
    CHECK(libtorch_gpt::relative_difference(losses, ref_losses) <= 1e-5);
    CHECK(libtorch_gpt::relative_difference(r.weights, ref) <= 1e-5);
}

TEST_CASE("profile_units gives every module of a Sequential a token latency table over the grid", "[libtorch][terapipe]")
{
    libtorch_gpt::config cfg{.vocab = 256, .seq_len = 16, .d_model = 32, .heads = 2, .layers = 2};
    auto model = libtorch_gpt::make_gpt(cfg, 1);
    const auto ids = torch::arange(4 * 16, torch::kLong).remainder(256).view({4, 16});
    const auto grid = tpipe::token_profile_grid(4, 16, 4);
    const auto tables = tpipe::libtorch::profile_units(model, ids, grid, {.warmup = 0, .repeats = 1});
    REQUIRE(tables.size() == 4);  // embeddings, 2 blocks, head
    for (const auto& t : tables) {
        CHECK(t.samples().size() == tpipe::measure([](auto...) {}, grid, {.warmup = 0, .repeats = 1}).size());
        CHECK(t.seconds(4, 8, 8) > 0);
    }
    for (const auto& p : model->parameters()) CHECK(!p.grad().defined());  // left as it was
}
