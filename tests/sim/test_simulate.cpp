#include <catch2/catch.hpp>

#include "tpipe/core/json.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/sim/svg.hpp"
#include "tpipe/sim/text_timeline.hpp"
#include "tpipe/slice/slicers.hpp"

using namespace tpipe;

namespace {
struct cost_case {
    double f, b, w;
};
const cost_case cost_cases[] = {{1, 1, 1}, {1, 2, 0.5}, {2, 3, 1}, {0.5, 0.25, 0.25}};
} // namespace

TEST_CASE("simulated makespan equals the closed form for GPipe and 1F1B: (M+P-1)(F+B)", "[sim][closed-form]")
{
    for (const auto& c : cost_cases)
        for (int P = 1; P <= 8; ++P)
            for (int M = 1; M <= 32; ++M)
                for (const char* name : {"gpipe", "1f1b"}) {
                    const auto sim = simulate(make_schedule(name).program(topology{P}, microbatches(M)),
                                              uniform_costs{c.f, c.b, c.w, 0, 0});
                    INFO(name << " P=" << P << " M=" << M << " f=" << c.f << " b=" << c.b << " w=" << c.w);
                    REQUIRE(sim.makespan == Approx((M + P - 1) * (c.f + c.b + c.w)));
                    const double bubble = 1 - M * (c.f + c.b + c.w) / sim.makespan;
                    REQUIRE(sim.bubble_fraction == Approx(bubble).margin(1e-12));
                }
}

TEST_CASE("simulated makespan equals the closed form for interleaved 1F1B: (MV+P-1)(F+B)", "[sim][closed-form]")
{
    for (const auto& c : cost_cases)
        for (int V = 1; V <= 4; ++V)
            for (int P = 1; P <= 8; ++P)
                for (int M = P; M <= 32; M += P) {
                    const auto sim = simulate(interleaved_1f1b{V}.program(topology{P}, microbatches(M)),
                                              uniform_costs{c.f, c.b, c.w, 0, 0});
                    INFO("P=" << P << " M=" << M << " V=" << V << " f=" << c.f << " b=" << c.b);
                    REQUIRE(sim.makespan == Approx((M * V + P - 1) * (c.f + c.b + c.w)));
                }
}

TEST_CASE("simulated makespan equals the closed form for ZB-H1: M(F+I+W) + (P-1)(F+I-W)", "[sim][closed-form]")
{
    // The zero-bubble paper's form, for M >= P and W <= F.
    for (const auto& c : cost_cases)
        for (int P = 1; P <= 8; ++P)
            for (int M = P; M <= 32; ++M) {
                const auto sim = simulate(zb_h1{}.program(topology{P}, microbatches(M)),
                                          uniform_costs{c.f, c.b, c.w, 0, 0});
                INFO("P=" << P << " M=" << M << " f=" << c.f << " b=" << c.b << " w=" << c.w);
                REQUIRE(sim.makespan == Approx(M * (c.f + c.b + c.w) + (P - 1) * (c.f + c.b - c.w)));
            }
}

TEST_CASE("token slicing shrinks GPipe's bubble: (MS+P-1)(F+B)/S", "[sim][closed-form][tokens]")
{
    for (int P = 1; P <= 8; ++P)
        for (int M = 1; M <= 4; ++M)
            for (int S = 1; S <= 8; ++S) {
                const auto sim = simulate(gpipe{}.program(topology{P}, microbatches(M, S)),
                                          uniform_costs{1, 1, 1, 0, S});
                REQUIRE(sim.makespan == Approx((M * S + P - 1) * 3.0 / S));
            }
}

TEST_CASE("transfers add their latency on every hop: GPipe gains 2(P-1)C", "[sim][comm]")
{
    for (int P = 1; P <= 6; ++P)
        for (int M = 1; M <= 8; ++M) {
            const auto sim = simulate(gpipe{}.program(topology{P}, microbatches(M)), uniform_costs{1, 1, 0, 0.25, 0});
            REQUIRE(sim.makespan == Approx((M + P - 1) * 2.0 + 2 * (P - 1) * 0.25));
        }
}

TEST_CASE("peak live activations: GPipe holds all M, 1F1B holds P-r on rank r", "[sim][memory]")
{
    const int P = 4, M = 8;
    const auto g = simulate(gpipe{}.program(topology{P}, microbatches(M)), uniform_costs{});
    const auto o = simulate(one_f_one_b{}.program(topology{P}, microbatches(M)), uniform_costs{});
    const auto z = simulate(zb_h1{}.program(topology{P}, microbatches(M)), uniform_costs{});
    for (int r = 0; r < P; ++r) {
        CHECK(g.peak_activations[r] == M);
        CHECK(o.peak_activations[r] == P - r);
        CHECK(z.peak_activations[r] <= P);  // zero bubble at 1F1B's memory
    }
    CHECK(g.busy == std::vector<double>(P, M * 3.0));
}

TEST_CASE("ZB-V fills most of the bubble at 1F1B's peak memory", "[sim][zb-v]")
{
    for (int P = 2; P <= 8; ++P) {
        const int M = 2 * P;
        const auto z = simulate(zb_v{}.program(topology{P}, microbatches(M)), uniform_costs{});
        const auto o = simulate(one_f_one_b{}.program(topology{P}, microbatches(M)), uniform_costs{2, 2, 2, 0, 0});
        INFO("P=" << P);
        CHECK(z.bubble_fraction < o.bubble_fraction / 2);
        for (int r = 0; r < P; ++r) CHECK(z.peak_activations[r] <= 2 * P);  // half-size chunks
    }
}

TEST_CASE("a timeline exports as Perfetto JSON, SVG and a text grid", "[sim][export]")
{
    const int P = 2, M = 3;
    const auto sim = simulate(one_f_one_b{}.program(topology{P}, microbatches(M)), uniform_costs{1, 1, 0, 0.5, 0});
    const auto trace = json::parse(chrome_trace(sim.events, P));
    int computes = 0, sends = 0;
    for (const auto& e : trace.at("traceEvents").as_array()) {
        if (e.at("ph").as_string() != "X") continue;
        (e.at("tid").as_number() < P ? computes : sends)++;
        CHECK(e.at("dur").as_number() >= 0);
    }
    CHECK(computes == 2 * P * M);
    CHECK(sends == 2 * (P - 1) * M);
    const auto svg = svg_timeline(sim.events, P, "1F1B");
    CHECK(svg.find("<svg") == 0);
    std::size_t rects = 0;
    for (auto pos = svg.find("<title>"); pos != std::string::npos; pos = svg.find("<title>", pos + 1)) ++rects;
    CHECK(rects == static_cast<std::size_t>(2 * P * M));
    const auto text = text_timeline(sim.events, P);
    CHECK(text.find("rank 0  F0 F1 .  .  B0 F2 B1 .  .  B2 \n") == 0);
}

TEST_CASE("simulating an invalid program throws its reason", "[sim]")
{
    program p = gpipe{}.program(topology{2}, microbatches(1));
    std::swap(p.actions[1][0], p.actions[1][1]);
    CHECK_THROWS_AS(simulate(p, uniform_costs{}), invalid_program);
}

TEST_CASE("the text timeline shows every action, with its stage where a rank holds several", "[sim][export][text]")
{
    // Interleaved on 4 ranks, V = 2, 8 microbatches: wider than 150 columns, so it wraps instead
    // of merging cells; every compute's label appears once, stage included.
    const auto prog = interleaved_1f1b{2}.program(topology{4}, microbatches(8));
    const auto sim = simulate(prog, uniform_costs{0.5, 0.5, 0.5, 0, 0});
    const auto text = text_timeline(sim.events, sim.ranks);
    std::size_t longest = 0;
    for (std::size_t pos = 0, eol; (eol = text.find('\n', pos)) != std::string::npos; pos = eol + 1)
        longest = std::max(longest, eol - pos);
    CHECK(longest <= 150);
    CHECK(text.rfind("t = 0\n", 0) == 0);
    for (const auto& row : prog.actions)
        for (const auto& a : row) {
            std::string l = " ";
            l += to_string(a);
            l += ' ';
            INFO(l);
            CHECK(text.find(l) != std::string::npos);
            CHECK(text.find(l, text.find(l) + 1) == std::string::npos);  // exactly once
        }
    // Unequal costs: a short W after a long I still gets its own cell.
    const auto z = simulate(zb_h1{}.program(topology{2}, microbatches(2)), uniform_costs{2, 3, 1, 0, 0});
    const auto zt = text_timeline(z.events, z.ranks, 1000);
    for (const char* l : {"F0 ", "F1 ", "I0 ", "I1 ", "W0 ", "W1 "}) CHECK(zt.find(l, zt.find("rank 1")) != std::string::npos);
}

TEST_CASE("simulated makespan equals the closed form for looped BFS: (MV+P-1)(F+B) for M >= P", "[sim][closed-form]")
{
    for (const auto& c : cost_cases)
        for (int V = 1; V <= 4; ++V)
            for (int P = 1; P <= 8; ++P)
                for (int M = P; M <= 24; ++M) {
                    const auto sim = simulate(looped_bfs{V}.program(topology{P}, microbatches(M)),
                                              uniform_costs{c.f, c.b, c.w, 0, 0});
                    INFO("P=" << P << " M=" << M << " V=" << V << " f=" << c.f << " b=" << c.b);
                    REQUIRE(sim.makespan == Approx((M * V + P - 1) * (c.f + c.b + c.w)));
                }
}

TEST_CASE("ZB-V in the paper's order: makespan 2M(F+I+W) + (P-1)F at F = I = W, for M >= 2P", "[sim][closed-form][zb-v]")
{
    // Zero bubble on every rank's own span; only the staggered start of (P-1) forwards remains.
    for (double t : {1.0, 0.5, 2.0})
        for (int P = 1; P <= 8; ++P)
            for (int M = 2 * P; M <= 32; ++M) {
                const auto sim = simulate(zb_v{zb_v::order::paper}.program(topology{P}, microbatches(M)),
                                          uniform_costs{t, t, t, 0, 0});
                INFO("P=" << P << " M=" << M << " t=" << t);
                REQUIRE(sim.makespan == Approx(2 * M * 3 * t + (P - 1) * t));
            }
}

TEST_CASE("interleaved zero-bubble fills interleaved 1F1B's bubble with W's", "[sim][zb]")
{
    for (int V = 1; V <= 3; ++V)
        for (int P = 2; P <= 8; ++P)
            for (int M : {P, 2 * P, 4 * P}) {
                const auto c = uniform_costs{1, 1, 1, 0, 0};
                const auto zb = simulate(interleaved_zb{V}.program(topology{P}, microbatches(M)), c);
                const auto il = simulate(interleaved_1f1b{V}.program(topology{P}, microbatches(M)), c);
                INFO("P=" << P << " M=" << M << " V=" << V);
                CHECK(zb.makespan < il.makespan);
            }
}

TEST_CASE("the text timeline stays bounded at any cost ratio, saying when it coarsens", "[sim][export][text]")
{
    const auto prog = one_f_one_b{}.program(topology{2}, microbatches(4));
    for (double f : {1e6, 1e9, 1e100}) {  // backward costs 1, forward f: f columns without the cap
        const auto sim = simulate(prog, uniform_costs{f, 1, 1, 0, 0});
        const auto text = text_timeline(sim.events, sim.ranks);
        CAPTURE(f);
        CHECK(text.size() < (std::size_t{3} << 20) / 2);
        // (At 1e100 a backward of 1 has no width next to the forwards' times: the grid is the
        // forwards', a few columns, and needs no coarsening.)
        if (f < 1e100) CHECK(text.rfind("(coarsened: one cell is ", 0) == 0);
        CHECK(text.find("rank 1") != std::string::npos);
    }
    // A denormal cost: the ratio is inf, which no size_t holds.
    const auto tiny = simulate(prog, uniform_costs{1e-320, 1, 1, 0, 0});
    const auto text = text_timeline(tiny.events, tiny.ranks);
    CHECK(text.rfind("(coarsened", 0) == 0);
    CHECK(text.find("rank 0") != std::string::npos);
    CHECK(text.find("rank 1") != std::string::npos);
}
