// tpipe::elastic::measure_units on models tpipe did not write: the chain of tests/elastic/
// chain_model.hpp, and a model whose units sleep for known times and log every call.
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "chain_model.hpp"
#include "tpipe/elastic/measure_units.hpp"

namespace {

// Units that sleep forward_ms[i] (backward_ms[i]) per call plus row_ms[i] per row, and log "F<i>"
// ("B<i>") with the rows and the payload they got; the payload is the unit index chain so far.
struct paced;
struct paced_stage {
    using input = std::vector<int>;
    using output = std::vector<int>;
    paced* m;
    int u0, u1;
    output forward(const tpipe::unit& u, input x);
    input backward(const tpipe::unit& u, output g);
    std::span<double> gradients() { return {}; }
};
struct paced {
    using stage_type = paced_stage;
    using frozen_output = std::vector<double>;
    std::vector<int> forward_ms, backward_ms, row_ms;
    std::vector<std::string> log;
    int steps = 0;
    std::optional<tpipe::uniform_pipeline<paced_stage>> pipe;
    tpipe::io_for<tpipe::uniform_pipeline<paced_stage>> io_;
    paced(std::vector<int> f, std::vector<int> b, std::vector<int> r = {})
        : forward_ms(std::move(f)), backward_ms(std::move(b)), row_ms(std::move(r))
    {
        row_ms.resize(forward_ms.size());
        io_.source = [](const tpipe::unit&) { return std::vector<int>{}; };
        io_.output_grad = [this](const tpipe::unit&, std::vector<int>&& y) {
            log.push_back("loss");
            y.push_back(-1);  // the seed the backward must start from
            return std::move(y);
        };
    }
    std::vector<double> unit_costs() const { return std::vector<double>(forward_ms.size(), 1.0); }
    int freezable_units() const { return static_cast<int>(forward_ms.size()) - 1; }
    tpipe::uniform_pipeline<paced_stage>& build(const tpipe::elastic::stage_request& r)
    {
        std::vector<paced_stage> stages;
        for (int s = 0; s < r.stages(); ++s) stages.push_back({this, r.cuts[s], r.cuts[s + 1]});
        return pipe.emplace(std::move(stages));
    }
    const auto& io() const { return io_; }
    void begin_step(std::span<const std::int64_t> ids, std::vector<frozen_output> outs)
    {
        std::ostringstream line;
        line << "begin " << ids.size() << (outs.empty() ? "" : " frozen");
        log.push_back(line.str());
    }
    double finish_step() { return ++steps; }
    void optimizer_step() { log.push_back("optimizer"); }
    void freeze(int) {}
    std::vector<std::span<std::byte>> trainable_state() { return {}; }
    frozen_output run_frozen(std::int64_t, std::optional<frozen_output>, int, int) { return {}; }
};
paced_stage::output paced_stage::forward(const tpipe::unit& u, input x)
{
    std::ostringstream line;  // (not string operator+: GCC 12 -O2 warns falsely in it, -Wrestrict)
    line << 'F' << u0 << " rows " << u.rows() << " after " << x.size();
    m->log.push_back(line.str());
    const auto i = static_cast<std::size_t>(u0);
    std::this_thread::sleep_for(std::chrono::milliseconds(m->forward_ms[i] + m->row_ms[i] * u.rows()));
    x.push_back(u0);
    return x;
}
paced_stage::input paced_stage::backward(const tpipe::unit& u, output g)
{
    std::ostringstream line;
    line << 'B' << u0 << " seeded " << (g.back() == -1 ? 1 : 0);
    m->log.push_back(line.str());
    const auto i = static_cast<std::size_t>(u0);
    std::this_thread::sleep_for(std::chrono::milliseconds(m->backward_ms[i] + m->row_ms[i] * u.rows()));
    return g;
}
static_assert(tpipe::elastic::freezable_model<paced>);

} // namespace

TEST_CASE("measure_units times each unit of any freezable model, per sample, forward then backward", "[elastic][measure]")
{
    // Unit 1's forward costs 30 ms a call whatever its rows; unit 2 costs 15 ms a row both ways.
    paced m({0, 30, 0}, {0, 0, 0}, {0, 0, 15});
    const std::vector<std::int64_t> ids{4, 5};
    const auto u = tpipe::elastic::measure_units(m, ids, {.seq_len = 8, .repeats = 3, .threads = 1});
    REQUIRE(u.forward.size() == 3);
    REQUIRE(u.backward.size() == 3);
    REQUIRE(u.forward_fixed.size() == 3);
    REQUIRE(u.backward_fixed.size() == 3);
    // The fit through a one-row microbatch and the two rows at once: unit 1's forward is all
    // fixed, unit 2's all per sample (a sleep lasts at least its time, and a little more).
    CHECK(u.forward_fixed[1] >= 0.025);
    CHECK(u.forward[1] < 0.005);
    CHECK(u.forward[2] >= 0.012);
    CHECK(u.backward[2] >= 0.012);
    CHECK(u.forward_fixed[2] < 0.005);
    CHECK(u.backward_fixed[2] < 0.005);
    // Its units hold no parameters: the optimizer step and the all-reduce cost them nothing.
    CHECK(u.update == std::vector<double>(3, 0.0));
    CHECK(u.reduce == std::vector<double>(3, 0.0));
    // The median of 3 passes: one preempted pass cannot make a unit that does not sleep as slow.
    CHECK(u.forward[0] + u.forward_fixed[0] < 0.005);
    CHECK(u.backward[1] + u.backward_fixed[1] < 0.005);
    // Each pass: a step of all the rows, each row a microbatch; units in order, each running every
    // row's forward; the loss's gradient of each row into the last unit's backward; units in
    // reverse; then 3 passes of the two rows as one microbatch; then 3 optimizer steps (the
    // median prices the step).
    const std::vector<std::string> pass{"begin 2",           "F0 rows 1 after 0", "F0 rows 1 after 0",
                                        "F1 rows 1 after 1", "F1 rows 1 after 1", "F2 rows 1 after 2",
                                        "F2 rows 1 after 2", "loss",              "loss",
                                        "B2 seeded 1",       "B2 seeded 1",       "B1 seeded 1",
                                        "B1 seeded 1",       "B0 seeded 1",       "B0 seeded 1"};
    const std::vector<std::string> whole{"begin 2", "F0 rows 2 after 0", "F1 rows 2 after 1", "F2 rows 2 after 2",
                                         "loss",    "B2 seeded 1",       "B1 seeded 1",       "B0 seeded 1"};
    std::vector<std::string> want;
    for (int r = 0; r < 3; ++r) want.insert(want.end(), pass.begin(), pass.end());
    for (int r = 0; r < 3; ++r) want.insert(want.end(), whole.begin(), whole.end());
    want.insert(want.end(), 3, "optimizer");
    CHECK(m.log == want);
    CHECK(m.steps == 6);
}

TEST_CASE("measure_units on the chain model leaves its weights and gives every unit a time", "[elastic][measure]")
{
    const std::vector<double> data{0.5, -1.0, 2.0, 0.25};
    tpipe_test::chain m(4, data);
    const auto before = m.w;
    const std::vector<std::int64_t> ids{0, 1, 2, 3};
    const auto u = tpipe::elastic::measure_units(m, ids, {.step = false});
    REQUIRE(u.forward.size() == 4);
    REQUIRE(u.backward.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {  // per sample, or all of it per microbatch
        CHECK(u.forward[i] + u.forward_fixed[i] > 0);
        CHECK(u.backward[i] + u.backward_fixed[i] > 0);
    }
    CHECK(m.w == before);
    CHECK(m.pipe->size() == 4);
    CHECK(u.update.empty());
}

TEST_CASE("measure_units prices the optimizer step by each unit's parameters, and their all-reduce", "[elastic][measure]")
{
    const std::vector<double> data{0.5, -1.0, 2.0, 0.25};  // the chain keeps a reference to it
    tpipe_test::chain m(4, data);
    const auto before = m.w;
    const std::vector<std::int64_t> ids{0, 1, 2, 3};
    const auto u = tpipe::elastic::measure_units(m, ids, {.seq_len = 1, .repeats = 3, .threads = 1});
    REQUIRE(u.update.size() == 4);
    REQUIRE(u.reduce.size() == 4);
    CHECK(m.w != before);  // the optimizer stepped (a scratch replica's weights are what it leaves)
    // One parameter per unit: equal shares of the step, each a positive time.
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(u.update[i] > 0);
        CHECK(u.update[i] == u.update[0]);
        CHECK(u.reduce[i] > 0);
    }
}

TEST_CASE("price_step apportions the step by parameters and refuses a negative step", "[elastic][measure]")
{
    tpipe::elastic::unit_seconds u;
    const std::vector<std::size_t> parameters{0, 100, 300};
    tpipe::elastic::price_step(u, parameters, 0.004);
    REQUIRE(u.update.size() == 3);
    CHECK(u.update[0] == 0.0);
    CHECK(u.update[1] == Approx(0.001));
    CHECK(u.update[2] == Approx(0.003));
    CHECK(u.reduce[0] == 0.0);
    CHECK(u.reduce[1] > 0);
    CHECK_THROWS_WITH(tpipe::elastic::price_step(u, parameters, -1.0), Catch::Contains("must be >= 0, got -1"));
}

TEST_CASE("measure_units refuses what it cannot measure, saying what is missing", "[elastic][measure]")
{
    const std::vector<double> data{1.0};
    tpipe_test::chain m(2, data);
    const std::vector<std::int64_t> one{0};
    CHECK_THROWS_WITH(tpipe::elastic::measure_units(m, std::span<const std::int64_t>{}),
                      Catch::Contains("needs at least one sample id"));
    CHECK_THROWS_WITH(tpipe::elastic::measure_units(m, one, {.seq_len = 1, .repeats = 0, .threads = 1}),
                      Catch::Contains("seq_len, repeats and threads must be >= 1, got 1, 0, 1"));
    m.io_.source = nullptr;
    CHECK_THROWS_WITH(tpipe::elastic::measure_units(m, one), Catch::Contains("needs a source"));
}
