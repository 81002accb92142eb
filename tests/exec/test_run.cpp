#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "pipes.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

struct slicing {
    std::string name;
    tpipe::scheme units;
};

std::vector<slicing> slicings(int P)
{
    return {
        {"microbatches", tpipe::microbatch_slicer{2 * P}.scheme({2 * P, 6})},
        {"grid", tpipe::uniform_grid_slicer{P, 3}.scheme({P, 6})},
        {"tokens", tpipe::token_slicer{{1, 2, 3}}.scheme({1, 6})},
    };
}

//! Runs `prog` pipelined and sequentially; checks outputs, input gradients, stage states, and
//! that the measured peak activations equal the simulator's.
template <bool Split>
void check_pipelined_equals_sequential(const tpipe::program& prog, tpipe::cpu_engine& eng,
                                       tpipe::run_options opts = {})
{
    auto ref = synth::make_uniform<Split>(prog.stages());
    const auto want = synth::sequential(ref, prog.units);

    auto pipe = synth::make_uniform<Split>(prog.stages());
    synth::results got;
    got.outputs.resize(prog.units.units());
    got.input_grads.resize(prog.units.units());
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    io.output_grad = [&](const tpipe::unit& u, synth::vec&& y) {
        got.outputs[prog.units.index(u.microbatch, u.slice)] = y;
        return synth::loss_grad(y);
    };
    io.input_grad = [&](const tpipe::unit& u, synth::vec&& dx) {
        got.input_grads[prog.units.index(u.microbatch, u.slice)] = std::move(dx);
    };
    const auto stats = tpipe::run(pipe, prog, eng, io, opts);
    got.states = synth::states_of(pipe);

    CHECK(got.outputs == want.outputs);
    CHECK(got.input_grads == want.input_grads);
    CHECK(got.states == want.states);
    const auto lowered = prog.lowered() ? prog : tpipe::lower(prog);
    CHECK(stats.actions == lowered.size());
    CHECK(stats.events.size() == (opts.trace ? lowered.size() : 0));
    const auto sim = tpipe::simulate(prog, tpipe::uniform_costs{});
    CHECK(stats.peak_activations == sim.peak_activations);
    for (const auto& e : stats.events) {  // (1 us of slack: timestamps come from per-core TSCs)
        CHECK(e.start <= e.end + 1e-6);
        CHECK(e.end <= stats.time + 1e-6);
    }
}

} // namespace

TEST_CASE("pipelined equals sequential for every schedule, slicing and rank count", "[exec][run]")
{
    int ran = 0;
    for (int P = 1; P <= 4; ++P) {
        tpipe::cpu_engine eng(P);
        for (const auto& name : tpipe::schedule_names()) {
            for (const auto& sl : slicings(P)) {
                tpipe::program prog;
                try {
                    prog = tpipe::make_schedule(name).program(tpipe::topology{P}, sl.units);
                } catch (const tpipe::invalid_argument&) {
                    continue;  // this schedule does not take this shape (e.g. too few microbatches)
                }
                CAPTURE(name, sl.name, P);
                check_pipelined_equals_sequential<true>(prog, eng);
                // Same program, every rank on one device (one loop drives several ranks), every
                // action traced.
                tpipe::run_options one_device;
                one_device.device_of_rank.assign(prog.ranks, 0);
                one_device.trace = true;
                check_pipelined_equals_sequential<true>(prog, eng, one_device);
                ++ran;
            }
        }
    }
    CHECK(ran >= 60);
}

TEST_CASE("ranks on devices that share a loop thread take turns and stay exact", "[exec][run]")
{
    tpipe::cpu_engine eng(4, {.threads = 2});  // ranks 0-1 on one thread, 2-3 on the other
    for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
        CAPTURE(name);
        const auto prog = tpipe::make_schedule(name).program(tpipe::topology{4}, tpipe::microbatches(8, 2));
        check_pipelined_equals_sequential<true>(prog, eng);
    }
}

TEST_CASE("zero-bubble schedules fall back to backward() for stages without the split", "[exec][run]")
{
    for (int P = 1; P <= 3; ++P) {
        tpipe::cpu_engine eng(P);
        for (const char* name : {"zb-h1", "zb-v"}) {
            CAPTURE(name, P);
            const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(2 * P, 2));
            check_pipelined_equals_sequential<false>(prog, eng);
        }
    }
}

TEST_CASE("a runner repeats iterations on the same engine", "[exec][run]")
{
    tpipe::cpu_engine eng(3);
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{3}, tpipe::microbatches(5, 2));
    auto pipe = synth::make_pipe<true>(std::make_index_sequence<3>{});
    tpipe::runner r(pipe, prog, eng);
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    io.output_grad = [](const tpipe::unit&, synth::vec&& y) { return synth::loss_grad(y); };
    auto ref = synth::make_pipe<true>(std::make_index_sequence<3>{});
    auto next = [](auto& p) {
        [&]<std::size_t... I>(std::index_sequence<I...>) { (p.template stage<I>().new_iteration(), ...); }(
            std::make_index_sequence<3>{});
    };
    for (int it = 0; it < 20; ++it) {
        next(pipe);
        next(ref);
        r.run(io);
        synth::sequential(ref, prog.units);
    }
    CHECK(synth::states_of(pipe) == synth::states_of(ref));
}

namespace {
// Stages with different payload types: int -> vector -> double, move-only in the middle.
struct to_vec {
    using input = int;
    using output = std::unique_ptr<std::vector<int>>;
    output forward(const tpipe::unit& u, int x) { return std::make_unique<std::vector<int>>(3, x + u.microbatch); }
    int backward(const tpipe::unit&, output g) { return (*g)[0] + (*g)[1] + (*g)[2]; }
};
struct sum {
    using input = std::unique_ptr<std::vector<int>>;
    using output = double;
    double forward(const tpipe::unit&, input x) { return (*x)[0] * 1.5; }
    input backward(const tpipe::unit&, double g) { return std::make_unique<std::vector<int>>(3, static_cast<int>(g)); }
};
} // namespace

TEST_CASE("payloads of different types are moved between stages, never copied", "[exec][run][pipeline]")
{
    auto pipe = tpipe::pipeline(to_vec{}, sum{});
    STATIC_REQUIRE(std::is_same_v<decltype(pipe)::input, int>);
    STATIC_REQUIRE(std::is_same_v<decltype(pipe)::output, double>);
    tpipe::cpu_engine eng(2);
    std::vector<double> outs(4);
    std::vector<int> grads(4);
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit& u) { return 10 * u.microbatch; };
    io.output_grad = [&](const tpipe::unit& u, double&& y) {
        outs[u.microbatch] = y;
        return 2.0;
    };
    io.input_grad = [&](const tpipe::unit& u, int&& g) { grads[u.microbatch] = g; };
    auto stats = tpipe::run(pipe, tpipe::gpipe{}, tpipe::microbatches(4), tpipe::topology{2}, eng, io);
    for (int m = 0; m < 4; ++m) {
        CHECK(outs[m] == (10 * m + m) * 1.5);
        CHECK(grads[m] == 6);
    }
    CHECK(stats.ranks == 2);
    CHECK(stats.busy.size() == 2);
    CHECK(stats.events.empty());
    CHECK_THROWS_WITH(stats.trace(), Catch::Contains("without run_options::trace"));
    tpipe::run_options traced;
    traced.trace = true;
    stats = tpipe::run(pipe, tpipe::gpipe{}, tpipe::microbatches(4), tpipe::topology{2}, eng, io, traced);
    CHECK(stats.events.size() == stats.actions);
    CHECK(stats.trace().find("\"traceEvents\"") != std::string::npos);
}

TEST_CASE("a stage passed by std::ref is used in place", "[exec][pipeline]")
{
    synth::stage<false> s0(2, 1), s1(1, 2);
    auto pipe = tpipe::pipeline(std::ref(s0), std::ref(s1));
    CHECK(&pipe.stage<0>() == &s0);
    tpipe::cpu_engine eng(2);
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    tpipe::run(pipe, tpipe::one_f_one_b{}, tpipe::microbatches(3), tpipe::topology{2}, eng, io);
    CHECK(s1.st.kv.size() == 3);  // the caller's object saw all three microbatches
}

TEST_CASE("run refuses programs and placements that do not fit the pipeline", "[exec][run]")
{
    tpipe::cpu_engine eng(2);
    auto pipe = synth::make_pipe<true>(std::make_index_sequence<2>{});
    tpipe::io_for<decltype(pipe)> io;
    io.source = synth::source;
    const auto three = tpipe::one_f_one_b{}.program(tpipe::topology{3}, tpipe::microbatches(3));
    CHECK_THROWS_AS(tpipe::run(pipe, three, eng, io), tpipe::invalid_program);
    const auto two = tpipe::one_f_one_b{}.program(tpipe::topology{2}, tpipe::microbatches(3));
    tpipe::run_options bad;
    bad.device_of_rank = {0, 2};
    CHECK_THROWS_AS(tpipe::run(pipe, two, eng, io, bad), tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::run(pipe, two, eng, tpipe::io_for<decltype(pipe)>{}), tpipe::invalid_argument);
    auto broken = tpipe::lower(two);
    std::swap(broken.actions[1][0], broken.actions[1][1]);  // F before its RECV
    CHECK_THROWS_AS(tpipe::run(pipe, broken, eng, io), tpipe::invalid_program);
}

namespace {
//! A stage holding a contiguous run of a model's layers (by pointer, so that re-cutting the
//! model keeps its layers and their accumulated gradients).
struct layer_range {
    using input = synth::vec;
    using output = synth::vec;
    std::vector<synth::stage<false>*> layers;
    synth::vec forward(const tpipe::unit& u, synth::vec x)
    {
        for (auto* l : layers) x = l->forward(u, std::move(x));
        return x;
    }
    synth::vec backward(const tpipe::unit& u, synth::vec g)
    {
        for (auto it = layers.rbegin(); it != layers.rend(); ++it) g = (*it)->backward(u, std::move(g));
        return g;
    }
};
} // namespace

TEST_CASE("a model cut at run time into 1 to 6 stages, re-cut between steps, equals sequential", "[exec][run][pipeline]")
{
    constexpr int L = 6;
    tpipe::cpu_engine eng(L);
    const auto units = tpipe::microbatch_slicer{6}.scheme({6, 6});
    auto model = synth::make_uniform<false>(L);
    auto reference = synth::make_uniform<false>(L);
    tpipe::io_for<tpipe::uniform_pipeline<layer_range>> io;
    io.source = synth::source;
    io.output_grad = [](const tpipe::unit&, synth::vec&& y) { return synth::loss_grad(y); };
    int steps = 0;
    for (int n : {1, 2, 3, 4, 5, 6, 4, 2}) {
        CAPTURE(n, steps);
        for (auto* l : synth::stage_list(model)) l->new_iteration();
        for (auto* l : synth::stage_list(reference)) l->new_iteration();
        std::vector<layer_range> cut(static_cast<std::size_t>(n));
        for (int k = 0; k < L; ++k) cut[static_cast<std::size_t>(k * n / L)].layers.push_back(&model.stage(k));
        tpipe::uniform_pipeline<layer_range> pipe(std::move(cut));
        tpipe::run(pipe, tpipe::one_f_one_b{}, units, tpipe::topology{n}, eng, io);
        synth::sequential(reference, units);
        ++steps;
        CHECK(synth::states_of(model) == synth::states_of(reference));
    }
    CHECK(steps == 8);
}

TEST_CASE("a pipeline shaped at run time refuses no stages and a stage outside it", "[exec][pipeline]")
{
    CHECK_THROWS_AS(tpipe::uniform_pipeline<layer_range>(std::vector<layer_range>{}), tpipe::invalid_argument);
    tpipe::uniform_pipeline<layer_range> one(std::vector<layer_range>(1));
    CHECK(one.size() == 1);
    CHECK_THROWS_WITH(one.stage(1), Catch::Contains("outside [0, 1)"));
}

TEST_CASE("receives posted out of the peer's send order run correctly on tpipe's tagged channels", "[exec][run][order]")
{
    // Rank 1 posts the receive of microbatch 1 before microbatch 0's, although rank 0 sends 0
    // first (tests/errors/inputs/out_of_order.csv): PyTorch would pair them the wrong way round
    // (tpipe::pytorch_order_problem refuses it for PyTorch); tpipe matches payloads by unit.
    const auto prog = tpipe::from_csv("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0RECV_B1,0B0,0B1\n"
                                      "1RECV_F1,1RECV_F0,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
    REQUIRE(tpipe::valid(prog));
    CHECK(tpipe::pytorch_order_problem(prog).find("rank 1 posts '1RECV_F1' where rank 0's next message to it is "
                                                  "'0SEND_F0' (for '1RECV_F0')") == 0);
    for (int devices : {2, 1}) {  // ranks on loops of their own, and sharing one
        tpipe::cpu_engine eng(devices);
        tpipe::run_options opts;
        opts.device_of_rank = {0, devices - 1};
        CAPTURE(devices);
        check_pipelined_equals_sequential<false>(prog, eng, opts);
    }
}
