#include <catch2/catch.hpp>

#include <map>

#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/over_tokens.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/slice/slicers.hpp"

using namespace tpipe;

// Validated by the compiler: schedule generation, lowering and checking are constexpr.
static_assert(valid(one_f_one_b{}.program(topology{.ranks = 4}, microbatches(8))));
static_assert(valid(lower(interleaved_1f1b{2}.program(topology{.ranks = 2}, microbatches(4, 2)))));
static_assert(valid(zb_h1{}.program(topology{.ranks = 3}, microbatches(5))));
constexpr bool backward_first_is_refused()
{
    program p = gpipe{}.program(topology{.ranks = 2}, microbatches(1));
    std::swap(p.actions[0][0], p.actions[0][1]);
    return !valid(p);
}
static_assert(backward_first_is_refused());
static_assert(schedule<gpipe> && schedule<zb_v> && schedule<any_schedule>);

namespace {
void count_work(const program& p)
{
    // Every unit runs F once and its backward once (B, or I and W) on every stage.
    const int S = p.stages(), U = p.units.units();
    std::vector<int> f(S * U), b(S * U), i(S * U), w(S * U);
    for (const auto& row : p.actions)
        for (const auto& a : row) {
            if (!is_compute(a.kind)) continue;
            const int k = a.stage * U + p.units.index(a.microbatch, a.slice);
            (a.kind == op::F ? f : a.kind == op::B ? b : a.kind == op::I ? i : w)[k]++;
        }
    for (int k = 0; k < S * U; ++k) {
        REQUIRE(f[k] == 1);
        REQUIRE(b[k] + i[k] == 1);
        REQUIRE(i[k] == w[k]);
    }
}

//! Whether `name` may refuse P x M, and the reason it must give.
const char* allowed_refusal(const std::string& name, int P, int M)
{
    if ((name == "interleaved" || name == "interleaved-zb") && M % std::max(1, M / P) != 0) return "rounds of equal size";
    if (name == "dualpipe-v" && M < 2 * P) return "needs at least";
    return nullptr;
}
} // namespace

TEST_CASE("every schedule validates for P <= 8, M <= 32, V <= 4, with and without token slices",
          "[schedule][property]")
{
    int checked = 0, refused = 0;
    for (const auto& name : schedule_names(true)) {
        const bool takes_v = schedule_registry::global().at(name).takes_virtual_stages;
        for (int V = 1; V <= (takes_v ? 4 : 1); ++V)
            for (int P = 1; P <= 8; ++P)
                for (int M = 1; M <= 32; ++M)
                    for (int S : {1, 3}) {
                        if (S > 1 && M > 12) continue;  // token slices multiply units; keep the sweep quick
                        INFO(name << " P=" << P << " M=" << M << " V=" << V << " S=" << S);
                        program prog;
                        if (const char* why = allowed_refusal(name, P, M)) {
                            CHECK_THROWS_WITH(prog = make_schedule(name, V).program(topology{P}, microbatches(M, S)),
                                              Catch::Contains(why));
                            ++refused;
                            continue;
                        }
                        prog = make_schedule(name, V).program(topology{P}, microbatches(M, S));
                        REQUIRE(prog.stages() == P * stages_per_rank(name, V));
                        const auto v = check(prog);
                        INFO(explain(prog, v));
                        REQUIRE(v.ok());
                        const auto lowered = lower(prog);
                        const auto lv = check(lowered);
                        INFO(explain(lowered, lv));
                        REQUIRE(lv.ok());
                        count_work(prog);
                        ++checked;
                    }
    }
    CHECK(checked > 6000);
    CHECK(refused > 0);
}

TEST_CASE("schedules refuse sizes they cannot serve", "[schedule]")
{
    CHECK_THROWS_WITH(interleaved_1f1b{2}.program(topology{4}, microbatches(9)),
                      Catch::Contains("2 rounds of equal size, which do not divide M = 9") && Catch::Contains("use M = 8 or 10"));
    CHECK_NOTHROW(interleaved_1f1b{2}.program(topology{4}, microbatches(6)));  // one round of 6, as PyTorch allows
    CHECK_THROWS_WITH(dualpipe_v{}.program(topology{4}, microbatches(7)), Catch::Contains("at least 8 microbatches"));
    CHECK_THROWS_WITH(interleaved_1f1b{0}.program(topology{4}, microbatches(8)), Catch::Contains(">= 1"));
    CHECK_THROWS_WITH(gpipe{}.program(topology{0}, microbatches(8)), Catch::Contains("at least 1 rank"));
    CHECK_THROWS_WITH(make_schedule("pipedream"), Catch::Contains("known schedules: gpipe"));
}

TEST_CASE("token-level schedules keep the causal order on every stage", "[schedule][tokens]")
{
    const auto units = grid_slicer{2, {4, 2, 1, 1}}.scheme(batch_shape{4, 8});
    for (const char* name : {"terapipe-gpipe", "terapipe-1f1b", "1f1b", "zb-h1", "zb-v"}) {
        const auto prog = make_schedule(name).program(topology{3}, units);
        INFO(name);
        REQUIRE(valid(prog));
        for (const auto& row : prog.actions) {
            std::map<std::pair<int, int>, int> last_f, last_b;  // (stage, mb) -> slice
            for (const auto& a : row) {
                auto key = std::make_pair(a.stage, a.microbatch);
                if (a.kind == op::F) {
                    CHECK(a.slice == (last_f.count(key) ? last_f[key] + 1 : 0));
                    last_f[key] = a.slice;
                } else if (a.kind == op::B || a.kind == op::I) {
                    CHECK(a.slice == (last_b.count(key) ? last_b[key] - 1 : units.slices(a.microbatch) - 1));
                    last_b[key] = a.slice;
                }
            }
        }
    }
}

TEST_CASE("token-level 1F1B keeps fewer units alive than it has", "[schedule][tokens]")
{
    // Rank r holds at most P-1-r+S units: the pipeline depth plus one microbatch's slices.
    const int P = 4, M = 4, S = 4;
    const auto prog = terapipe_1f1b{}.program(topology{P}, microbatches(M, S));
    for (int r = 0; r < P; ++r) {
        int live = 0, peak = 0;
        for (const auto& a : prog.actions[r]) {
            live += a.kind == op::F ? 1 : -1;
            peak = std::max(peak, live);
        }
        CHECK(peak == P - 1 - r + S);
    }
}

TEST_CASE("lowering adds one send and one receive per cross-rank edge, next to the computes", "[schedule][lower]")
{
    const auto prog = one_f_one_b{}.program(topology{3}, microbatches(4));
    const auto low = lower(prog);
    // Two boundaries, M microbatches, forward and backward: 2*2*4 sends and as many receives.
    CHECK(low.size() == prog.size() + 2 * 2 * 2 * 4);
    CHECK(to_string(low.actions[1][0]) == "1RECV_F0");
    CHECK(to_string(low.actions[1][1]) == "1F0");
    CHECK(to_string(low.actions[1][2]) == "1SEND_F0");
    CHECK_THROWS_AS(lower(low), invalid_argument);
    // On one rank nothing needs communication.
    CHECK(lower(gpipe{}.program(topology{1}, microbatches(3))) == gpipe{}.program(topology{1}, microbatches(3)));
}

TEST_CASE("a hand-made deadlocked program is refused, naming who waits for what", "[schedule][validate]")
{
    program p{2, {0, 1}, microbatches(2), {}};
    p.actions = {{{0, op::F, 0}, {0, op::B, 0}, {0, op::F, 1}, {0, op::B, 1}},
                 {{1, op::F, 1}, {1, op::B, 1}, {1, op::F, 0}, {1, op::B, 0}}};
    const auto v = check(p);
    REQUIRE(v.what == problem::deadlock);
    REQUIRE(v.waits.size() == 2);
    CHECK(v.waits[0] == wait_edge{0, {0, op::B, 0}, {1, op::B, 0}, 1});
    CHECK(v.waits[1] == wait_edge{1, {1, op::F, 1}, {0, op::F, 1}, 0});
    CHECK_THROWS_WITH(validate(p), "deadlock: no rank can make progress; rank 0 at '0B0' waits for '1B0' on rank 1 "
                                   "(not reached); rank 1 at '1F1' waits for '0F1' on rank 0 (not reached)");
    // The same deadlock after lowering: the backward waits for the payload its posted receive expects.
    CHECK_THROWS_WITH(validate(lower(p)), Catch::Contains("rank 0 at '0B0' waits for '1SEND_B0' on rank 1"));
}

TEST_CASE("the validator names the broken rule", "[schedule][validate]")
{
    auto base = [] { return one_f_one_b{}.program(topology{2}, microbatches(2, 2)); };
    auto refused = [](const program& p, const std::string& what) {
        CHECK_THROWS_WITH(validate(p), Catch::Contains(what));
    };
    {
        auto p = base();  // backward before its forward
        std::swap(p.actions[1][0], p.actions[1][2]);
        refused(p, "rank 1, action #0 '1B0.1': needs '1F0.1' first");
    }
    {
        auto p = base();  // slice 1 before slice 0: the causal rule
        std::swap(p.actions[0][0], p.actions[0][1]);
        refused(p, "rank 0, action #0 '0F0.1': needs '0F0' first");
    }
    {
        auto p = base();
        p.actions[0].push_back({0, op::F, 0, 0});
        refused(p, "already ran");
    }
    {
        auto p = base();
        p.actions[0].pop_back();
        refused(p, "never runs '0B1'");
    }
    {
        auto p = base();
        p.actions[0][0].stage = 1;
        refused(p, "stage 1 is placed on rank 1");
    }
    {
        auto p = base();
        p.actions[0][0].microbatch = 9;
        refused(p, "not a unit of this iteration");
    }
    {
        auto p = base();  // W without an I
        p.actions[1].push_back({1, op::W, 0, 0});
        refused(p, "needs '1I0' first");
    }
    {
        auto p = lower(base());  // a compute without the receive of its input
        auto& row = p.actions[1];
        row.erase(std::find(row.begin(), row.end(), action{1, op::RECV_F, 1, 1}));
        refused(p, "needs '1RECV_F1.1' first");
    }
    {
        auto p = gpipe{}.program(topology{1}, microbatches(2));  // a unit never runs
        std::erase_if(p.actions[0], [](const action& a) { return a.microbatch == 1; });
        refused(p, "rank 0 never runs '0F1'");
    }
    {
        auto p = lower(gpipe{}.program(topology{2}, microbatches(1)));  // its partner never comes
        std::erase_if(p.actions[1], [](const action& a) { return a.kind != op::RECV_F; });
        refused(p, "rank 0 at '0B0' waits for '1SEND_B0' on rank 1 (which it never runs)");
    }
    {
        // Stage order: on the V-shaped rank that holds stages 1 and 2, B of stage 1 must follow
        // B of stage 2.
        auto p = zb_v{}.program(topology{2}, microbatches(1));
        for (auto& a : p.actions[1]) a.kind = a.kind == op::I ? op::B : a.kind;
        std::erase_if(p.actions[1], [](const action& a) { return a.kind == op::W; });
        std::erase_if(p.actions[0], [](const action& a) { return a.kind == op::W; });
        for (auto& a : p.actions[0]) a.kind = a.kind == op::I ? op::B : a.kind;
        REQUIRE(valid(p));
        auto& row = p.actions[1];
        std::iter_swap(std::find(row.begin(), row.end(), action{1, op::B, 0, 0}),
                       std::find(row.begin(), row.end(), action{2, op::B, 0, 0}));
        refused(p, "'1B0': needs '2B0' first");
    }
}

TEST_CASE("CSV export and import are lossless in compute-only and lowered forms", "[schedule][csv]")
{
    for (const auto& name : schedule_names(true))
        for (int P : {1, 2, 4})
            for (int S : {1, 2}) {
                const auto prog = make_schedule(name).program(topology{P}, microbatches(2 * P, S));
                INFO(name << " P=" << P << " S=" << S);
                CHECK(from_csv(to_csv(prog)) == prog);
                CHECK(from_csv(to_csv(lower(prog))) == lower(prog));
            }
    const auto p = from_csv("0F0,,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");  // PyTorch's empty idle cells
    CHECK(p.ranks == 2);
    CHECK(p.stage_rank == std::vector<int>{0, 1});
    CHECK(valid(p));
    CHECK(to_csv(gpipe{}.program(topology{2}, microbatches(2))) == "0F0,0F1,0B0,0B1\n1F0,1F1,1B0,1B1\n");
}

TEST_CASE("bad CSV is refused with its line", "[schedule][csv]")
{
    CHECK_THROWS_WITH(from_csv("0F0,0B0\n0F1\n"), Catch::Contains("stage 0 appears on rank 0 and on rank 1"));
    CHECK_THROWS_WITH(from_csv("0F0\n1Q0\n"), Catch::Contains("CSV line 2"));
    CHECK_THROWS_AS(from_csv(""), parse_error);
    CHECK_THROWS_WITH(from_csv("1F0,1B0\n"), Catch::Contains("stage 0 has no compute action"));
}

namespace {
// A user-written schedule in a dozen lines: all forwards, then the backwards in reverse order.
struct reverse_gpipe {
    constexpr std::string_view name() const { return "reverse-gpipe"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        microbatch_order order(t.ranks);
        std::vector<int> placement(t.ranks);
        for (int r = 0; r < t.ranks; ++r) {
            placement[r] = r;
            for (int m = 0; m < units.microbatches(); ++m) order[r].push_back({r, op::F, m});
            for (int m = units.microbatches() - 1; m >= 0; --m) order[r].push_back({r, op::B, m});
        }
        return expand_slices(t.ranks, placement, units, order);
    }
};
} // namespace

TEST_CASE("a custom schedule written as a small generator is a schedule and validates", "[schedule][custom]")
{
    STATIC_REQUIRE(schedule<reverse_gpipe>);
    STATIC_REQUIRE(valid(reverse_gpipe{}.program(topology{4}, microbatches(6, 2))));
    const any_schedule s = reverse_gpipe{};
    CHECK(s.name() == "reverse-gpipe");
    CHECK(valid(s.program(topology{3}, microbatches(3))));
}

TEST_CASE("over_tokens runs any microbatch schedule over token slices, causally", "[schedule][combinator]")
{
    const auto units = grid_slicer{2, {4, 2, 1, 1}}.scheme(batch_shape{4, 8});
    // The built-in schedules already expand slices this way: the combinator must agree.
    for (const auto& name : schedule_names(true)) {
        if (name == "terapipe-1f1b" || name == "dualpipe-v") continue;  // orders units itself / needs M >= 2P
        const auto s = make_schedule(name);
        INFO(name);
        CHECK(over_tokens(s).program(topology{3}, units) == s.program(topology{3}, units));
        CHECK(over_tokens(s).name() == "tokens(" + name + ")");
    }
    // A schedule that knows nothing of slices (it names slice 0 only) becomes a token-level one.
    struct blind_gpipe {
        std::string_view name() const { return "blind-gpipe"; }
        tpipe::program program(const topology& t, const scheme& u) const
        {
            tpipe::program p{t.ranks, loop_placement(t.ranks, t.ranks), u, std::vector<std::vector<action>>(t.ranks)};
            for (int r = 0; r < t.ranks; ++r) {
                for (int m = 0; m < u.microbatches(); ++m) p.actions[r].push_back({r, op::F, m, 0});
                for (int m = 0; m < u.microbatches(); ++m) p.actions[r].push_back({r, op::B, m, 0});
            }
            return p;
        }
    };
    CHECK_FALSE(valid(blind_gpipe{}.program(topology{3}, units)));  // misses every slice but the first
    const auto tokens = over_tokens(blind_gpipe{}).program(topology{3}, units);
    CHECK(valid(tokens));
    CHECK(tokens == gpipe{}.program(topology{3}, units));
    struct names_slices {  // orders slices itself, whatever it is given: over_tokens refuses it
        std::string_view name() const { return "names-slices"; }
        tpipe::program program(const topology&, const scheme& u) const
        {
            return tpipe::program{1, {0}, u, {{{0, op::F, 0, 1}}}};
        }
    };
    CHECK_THROWS_WITH(over_tokens(names_slices{}).program(topology{1}, microbatches(1, 2)),
                      Catch::Contains("names-slices already names token slices ('0F0.1')"));
}

TEST_CASE("the warm-up depth of 1F1B and ZB-H1 is a knob: more forwards first, more alive", "[schedule][combinator]")
{
    for (int e = 0; e <= 3; ++e)
        for (int P = 1; P <= 6; ++P)
            for (int M = 1; M <= 12; ++M) {
                INFO("extra=" << e << " P=" << P << " M=" << M);
                const auto o = one_f_one_b{.extra_warmup = e}.program(topology{P}, microbatches(M));
                const auto z = zb_h1{.extra_warmup = e}.program(topology{P}, microbatches(M));
                REQUIRE(valid(o));
                REQUIRE(valid(z));
                for (int r = 0; r < P; ++r) {
                    int live = 0, peak = 0;
                    for (const auto& a : o.actions[r]) peak = std::max(peak, live += a.kind == op::F ? 1 : -1);
                    CHECK(peak == std::min(P - r + e, M));
                }
            }
    CHECK_THROWS_WITH(one_f_one_b{.extra_warmup = -1}.program(topology{2}, microbatches(2)), Catch::Contains(">= 0"));
}

TEST_CASE("must_be_valid passes valid programs and names the rule an invalid one breaks", "[schedule][validate]")
{
    STATIC_REQUIRE(must_be_valid(zb_h1{}.program(topology{4}, microbatches(8, 2))));
    // In a static_assert the call below stops compilation with "call to non-'constexpr' function
    // 'void tpipe::rule_broken::an_action_comes_before_what_it_needs_on_its_rank()'"; at run time
    // it returns false.
    program p = gpipe{}.program(topology{2}, microbatches(2));
    std::swap(p.actions[1][0], p.actions[1][2]);
    CHECK_FALSE(must_be_valid(p));
}
