// The libtorch adapter: the example GPT trained pipelined equals plain libtorch; refusals at the
// stage boundary and in the payload header; gradients() all-reduced by tpipe::data_parallel.
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include <torch/torch.h>
#undef CHECK  // Debian's libtorch brings glog's CHECK; the tests use Catch's
#include <catch2/catch.hpp>

#include <tpipe/adapters/libtorch.hpp>
#include <tpipe/comm/thread_communicator.hpp>
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/exec/run.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "training.hpp"

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
    io.loss = [](const tpipe::unit&, torch::Tensor&& y) { return torch::ones_like(y); };
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
    CHECK_THROWS_WITH(tpipe::libtorch::cut(model, {0, 1}), Catch::Contains("rise strictly from 0 to the Sequential's 2"));
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
                io.loss = [](const tpipe::unit&, torch::Tensor&& y) { return 2 * y; };  // d(sum y^2)/dy
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
