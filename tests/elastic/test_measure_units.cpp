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

// Units that sleep forward_ms[i] (backward_ms[i]) per call and log "F<i>" ("B<i>") with the rows
// and the payload they got; the payload is the unit index chain so far.
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
    std::vector<int> forward_ms, backward_ms;
    std::vector<std::string> log;
    int steps = 0;
    std::optional<tpipe::uniform_pipeline<paced_stage>> pipe;
    tpipe::io_for<tpipe::uniform_pipeline<paced_stage>> io_;
    explicit paced(std::vector<int> f, std::vector<int> b) : forward_ms(std::move(f)), backward_ms(std::move(b))
    {
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
    std::this_thread::sleep_for(std::chrono::milliseconds(m->forward_ms[static_cast<std::size_t>(u0)]));
    x.push_back(u0);
    return x;
}
paced_stage::input paced_stage::backward(const tpipe::unit&, output g)
{
    std::ostringstream line;
    line << 'B' << u0 << " seeded " << (g.back() == -1 ? 1 : 0);
    m->log.push_back(line.str());
    std::this_thread::sleep_for(std::chrono::milliseconds(m->backward_ms[static_cast<std::size_t>(u0)]));
    return g;
}
static_assert(tpipe::elastic::freezable_model<paced>);

} // namespace

TEST_CASE("measure_units times each unit of any freezable model, per sample, forward then backward", "[elastic][measure]")
{
    paced m({0, 30, 0}, {0, 0, 30});
    const std::vector<std::int64_t> ids{4, 5};
    const auto u = tpipe::elastic::measure_units(m, ids, {.seq_len = 8, .repeats = 3, .threads = 1});
    REQUIRE(u.forward.size() == 3);
    REQUIRE(u.backward.size() == 3);
    CHECK(u.update.empty());
    // A sleep lasts at least its time (one per row), and the figures are per sample.
    CHECK(u.forward[1] >= 0.015);
    CHECK(u.backward[2] >= 0.015);
    // The median of 3 passes: one preempted pass cannot make a unit that does not sleep as slow.
    CHECK(u.forward[0] < u.forward[1]);
    CHECK(u.backward[1] < u.backward[2]);
    // Each pass: a step of all the rows, each row a microbatch; units in order, each running every
    // row's forward; the loss's gradient of each row into the last unit's backward; units in
    // reverse; no optimizer step.
    const std::vector<std::string> pass{"begin 2",           "F0 rows 1 after 0", "F0 rows 1 after 0",
                                        "F1 rows 1 after 1", "F1 rows 1 after 1", "F2 rows 1 after 2",
                                        "F2 rows 1 after 2", "loss",              "loss",
                                        "B2 seeded 1",       "B2 seeded 1",       "B1 seeded 1",
                                        "B1 seeded 1",       "B0 seeded 1",       "B0 seeded 1"};
    std::vector<std::string> want;
    for (int r = 0; r < 3; ++r) want.insert(want.end(), pass.begin(), pass.end());
    CHECK(m.log == want);
    CHECK(m.steps == 3);
}

TEST_CASE("measure_units on the chain model leaves its weights and gives every unit a time", "[elastic][measure]")
{
    const std::vector<double> data{0.5, -1.0, 2.0, 0.25};
    tpipe_test::chain m(4, data);
    const auto before = m.w;
    const std::vector<std::int64_t> ids{0, 1, 2, 3};
    const auto u = tpipe::elastic::measure_units(m, ids);
    REQUIRE(u.forward.size() == 4);
    REQUIRE(u.backward.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(u.forward[i] > 0);
        CHECK(u.backward[i] > 0);
    }
    CHECK(m.w == before);
    CHECK(m.pipe->size() == 4);
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
    m.io_.output_grad = nullptr;
    CHECK_THROWS_WITH(tpipe::elastic::measure_units(m, one), Catch::Contains("needs a source and an output_grad"));
}
