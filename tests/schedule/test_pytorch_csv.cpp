// PyTorch 2.15 interoperability, against the CSVs PyTorch itself writes (tests/schedule/fixtures,
// made by make_pytorch_fixtures.py there; no PyTorch needed to run these tests).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/slice/slicers.hpp"

using namespace tpipe;
namespace fs = std::filesystem;

namespace {
fs::path fixtures() { return fs::path(__FILE__).parent_path() / "fixtures"; }

std::string read(const fs::path& p)
{
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

std::vector<fs::path> fixture_files(const std::string& suffix)
{
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(fixtures()))
        if (e.path().filename().string().ends_with(suffix)) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

//! The file without its idle cells (what a program keeps of it).
std::string without_idle(const std::string& csv)
{
    std::string out, line;
    std::size_t pos = 0;
    while (pos < csv.size()) {
        std::size_t eol = csv.find("\r\n", pos);
        line = csv.substr(pos, eol - pos);
        pos = eol + 2;
        std::string kept;
        std::size_t c = 0;
        while (c <= line.size()) {
            std::size_t comma = std::min(line.find(',', c), line.size());
            if (comma > c) {
                if (!kept.empty()) kept += ',';
                kept.append(line, c, comma - c);
            }
            c = comma + 1;
        }
        out += kept + "\r\n";
    }
    return out;
}

//! A rank's list without what only one side's lowering adds (PyTorch's receive positions and
//! FSDP actions): computes, groups, sends, waits for sends, gradient reductions, in order.
std::vector<std::vector<action>> comparable(const program& p)
{
    std::vector<std::vector<action>> out;
    for (const auto& row : p.actions) {
        auto& r = out.emplace_back();
        for (const auto& a : row)
            if (a.kind != op::RECV_F && a.kind != op::RECV_B && a.kind != op::UNSHARD && a.kind != op::RESHARD)
                r.push_back(a);
    }
    return out;
}
} // namespace

TEST_CASE("PyTorch's fixtures are there, one pair per schedule class and size", "[schedule][pytorch]")
{
    CHECK(fixture_files(".compute.csv").size() >= 38);
    CHECK(fixture_files(".lowered.csv").size() >= 36);
    CHECK(read(fixtures() / "VERSION").rfind("torch 2.15", 0) == 0);
}

TEST_CASE("every PyTorch CSV reads, validates and writes back byte for byte (idle cells aside)",
          "[schedule][pytorch][csv]")
{
    int checked = 0;
    for (const auto& suffix : {".compute.csv", ".lowered.csv"})
        for (const auto& f : fixture_files(suffix)) {
            const std::string text = read(f);
            INFO(f.filename().string());
            REQUIRE(text.find("\r\n") != std::string::npos);  // PyTorch's csv.writer: CRLF
            const program p = from_csv(text);
            if (f.filename().string().rfind("Schedule1F1B_", 0) == 0) {
                // PyTorch 2.15's Schedule1F1B order is wrong on its last rank (it runs microbatches
                // 1..M and never 0); PyTorch's own validator refuses it too.
                CHECK_THROWS_WITH(validate(p), Catch::Contains("needs '" + std::to_string(p.ranks - 1) + "F0' first"));
                continue;
            }
            const auto v = check(p);
            INFO(explain(p, v));
            REQUIRE(v.ok());
            CHECK(p.lowered() == (std::string(suffix) == ".lowered.csv"));
            CHECK(to_pytorch_csv(p) == without_idle(text));
            CHECK(from_csv(to_csv(p)) == p);
            ++checked;
        }
    CHECK(checked >= 70);
}

TEST_CASE("tpipe lowers PyTorch's compute-only orders as PyTorch does, receives aside", "[schedule][pytorch][lower]")
{
    // PyTorch posts receives as early as it can and adds FSDP actions; everything else —
    // computes, sends, WAIT_SEND placement, REDUCE_GRAD placement — must be the same.
    int checked = 0;
    for (const auto& f : fixture_files(".compute.csv")) {
        auto lowered_file = f.string();
        lowered_file.replace(lowered_file.size() - 12, 12, ".lowered.csv");
        if (!fs::exists(lowered_file)) continue;
        INFO(f.filename().string());
        const program ours = from_csv(to_pytorch_csv(lower(from_csv(read(f)))));
        const program theirs = from_csv(read(lowered_file));
        CHECK(ours.stage_rank == theirs.stage_rank);
        CHECK(comparable(ours) == comparable(theirs));
        ++checked;
    }
    CHECK(checked >= 36);
}

TEST_CASE("a PyTorch-lowered program simulates as long as its compute-only order: receives post, computes wait",
          "[schedule][pytorch][sim]")
{
    // PyTorch posts each receive early and waits at the compute that consumes it; with sends
    // eager, its lowered program then runs exactly as the compute-only order. (With receives
    // blocking where they stand, these fixtures simulated up to 1.67x longer at F = I = W.)
    int checked = 0;
    for (const auto& f : fixture_files(".lowered.csv")) {
        auto compute_file = f.string();
        compute_file.replace(compute_file.size() - 12, 12, ".compute.csv");
        const program lowered = from_csv(read(f)), compute = from_csv(read(compute_file));
        for (const auto& c : {uniform_costs{1, 1, 1, 0, 0}, uniform_costs{1, 2, 0.5, 0.25, 0}}) {
            INFO(f.filename().string() << " comm=" << c.comm);
            const auto a = simulate(lowered, c), b = simulate(compute, c);
            CHECK(a.makespan == Approx(b.makespan));
            CHECK(a.busy == b.busy);
        }
        ++checked;
    }
    CHECK(checked >= 36);
}

TEST_CASE("a receive posted early does not block its rank", "[schedule][sim][recv]")
{
    // GPipe on 2 ranks, rank 1 posting both receives first: makespan (M+P-1)(F+B) = 6 as
    // compute-only; a blocking receive would hold 1F0 until 0F1 is sent (7).
    const program p = from_csv("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
                               "1RECV_F0,1RECV_F1,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1\n");
    REQUIRE(valid(p));
    CHECK(simulate(p, uniform_costs{1, 1, 0, 0, 0}).makespan == Approx(6));
    CHECK(simulate(gpipe{}.program(topology{2}, microbatches(2)), uniform_costs{1, 1, 0, 0, 0}).makespan == Approx(6));
    // A compute without its posted receive is still refused, and so is a posted receive that
    // no send ever fills (the compute waits forever).
    CHECK_THROWS_WITH(validate(from_csv("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n")),
                      Catch::Contains("'1F0': needs '1RECV_F0' first"));
    CHECK_THROWS_WITH(validate(from_csv("0F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n")),
                      Catch::Contains("rank 1 at '1F0' waits for '0SEND_F0' on rank 0 (which it never runs)"));
}

TEST_CASE("PyTorch's other action kinds: text, rules and simulated cost", "[schedule][pytorch][action]")
{
    CHECK(parse_action("3REDUCE_GRAD") == action{3, op::REDUCE_GRAD, 0, 0});
    CHECK(parse_action("1WAIT_SEND_B7") == action{1, op::WAIT_SEND_B, 7, 0});
    CHECK(to_string(action{0, op::WAIT_REDUCE_GRAD, 0, 0}) == "0WAIT_REDUCE_GRAD");
    for (int k = 0; k < op_count - 1; ++k) {  // every single-action kind round-trips
        const action a{5, static_cast<op>(k), is_stage_level(static_cast<op>(k)) ? 0 : 4, 0};
        CHECK(parse_action(to_string(a)) == a);
    }
    CHECK_THROWS_WITH(parse_action("0UNSHARD3"), Catch::Contains("names a stage only"));
    CHECK(parse_cell("(0F3;3B1)OVERLAP_F_B") ==
          std::vector<action>{overlap_header(2), {0, op::F, 3, 0}, {3, op::B, 1, 0}});
    CHECK_THROWS_WITH(parse_cell("(0F3)OVERLAP_F_B"), Catch::Contains("at least two"));
    CHECK_THROWS_WITH(parse_cell("(0F3;0SEND_F3)OVERLAP_F_B"), Catch::Contains("groups computes"));
    CHECK_THROWS_WITH(parse_cell("(0F3;3B1)"), Catch::Contains("OVERLAP_F_B"));
    STATIC_REQUIRE(is_runnable(op::RECV_B) && !is_runnable(op::WAIT_SEND_F) && !is_compute(op::OVERLAP_F_B));

    auto refused = [](const char* csv, const std::string& what) {
        CHECK_THROWS_WITH(validate(from_csv(csv)), Catch::Contains(what));
    };
    refused("0F0,0F1,0B0,0REDUCE_GRAD,0B1\n", "'0REDUCE_GRAD': needs '0B1' first");
    refused("0F0,0F1,0B0,0B1,0WAIT_REDUCE_GRAD\n", "needs '0REDUCE_GRAD' first");
    refused("0UNSHARD,0F0,0RESHARD,0B0\n", "stage 0 uses FSDP and its parameters are not gathered");
    refused("0UNSHARD,0UNSHARD,0F0,0B0\n", "already ran");
    refused("0F0,0WAIT_SEND_F0,0SEND_F0,0RECV_B0,0B0\n1RECV_F0,1F0,1B0,1SEND_B0\n", "needs '0SEND_F0' first");
    program p = from_csv("0F0,0B0\n");
    p.actions[0].insert(p.actions[0].begin(), overlap_header(3));
    CHECK_THROWS_WITH(validate(p), Catch::Contains("must be followed by the 3 computes"));

    // Zero cost unless the cost model gives one; WAIT_REDUCE_GRAD then blocks for it.
    struct reduce_costs : uniform_costs {
        double compute(op k, int s, const unit& u) const { return k == op::REDUCE_GRAD ? 5 : uniform_costs::compute(k, s, u); }
    };
    const program g = from_csv("0F0,0F1,0B0,0B1,0REDUCE_GRAD,0WAIT_REDUCE_GRAD\n");
    CHECK(simulate(g, uniform_costs{1, 1, 1, 0, 0}).makespan == Approx(6));
    CHECK(simulate(g, reduce_costs{{1, 1, 1, 0, 0}}).makespan == Approx(11));
}

TEST_CASE("export to PyTorch refuses token slices and completes lowered programs", "[schedule][pytorch][csv]")
{
    CHECK_THROWS_WITH(to_pytorch_csv(gpipe{}.program(topology{2}, microbatches(2, 3))),
                      Catch::Contains("microbatch 0 has 3") && Catch::Contains("PyTorch's pipelining cannot express"));
    const auto low = lower(one_f_one_b{}.program(topology{2}, microbatches(2)));
    const program back = from_csv(to_pytorch_csv(low));
    REQUIRE(valid(back));
    // Every send gets its wait, every stage one gradient reduction and its wait.
    int sends = 0, waits = 0, reduces = 0;
    for (const auto& row : back.actions)
        for (const auto& a : row) {
            sends += a.kind == op::SEND_F || a.kind == op::SEND_B;
            waits += a.kind == op::WAIT_SEND_F || a.kind == op::WAIT_SEND_B;
            reduces += a.kind == op::REDUCE_GRAD;
        }
    CHECK(sends == 4);
    CHECK(waits == sends);
    CHECK(reduces == 2);
    CHECK(to_pytorch_csv(back) == to_pytorch_csv(low));  // nothing added twice
    CHECK(simulate(back, uniform_costs{}).makespan == Approx(simulate(low, uniform_costs{}).makespan));
}

namespace {
struct fixture_name {
    std::string cls;
    int P = 0, M = 0;
};
fixture_name parse_name(const fs::path& f)
{
    const std::string n = f.filename().string();  // <Class>_P<p>_M<m>.compute.csv
    const auto p = n.find("_P"), m = n.find("_M"), dot = n.find('.');
    return {n.substr(0, p), std::stoi(n.substr(p + 2, m - p - 2)), std::stoi(n.substr(m + 2, dot - m - 2))};
}

//! Computes and group headers only (PyTorch's single-stage classes also list REDUCE_GRAD).
std::vector<std::vector<action>> computes(const program& p)
{
    std::vector<std::vector<action>> out;
    for (const auto& row : p.actions) {
        auto& r = out.emplace_back();
        for (const auto& a : row)
            if (is_compute(a.kind) || a.kind == op::OVERLAP_F_B) r.push_back(a);
    }
    return out;
}
} // namespace

TEST_CASE("tpipe's schedules reached by PyTorch's class names build PyTorch's orders", "[schedule][pytorch][registry]")
{
    // Same computes in the same order on every rank (PyTorch's idle cells aside), for GPipe,
    // interleaved 1F1B (M a multiple of P or not), looped BFS, interleaved zero-bubble, DualPipeV
    // with its OVERLAP_F_B groups, and ZB-V in the paper's order.
    int checked = 0;
    for (const auto& f : fixture_files(".compute.csv")) {
        const auto [cls, P, M] = parse_name(f);
        if (cls == "Schedule1F1B") continue;  // PyTorch's own order is wrong (see above)
        INFO(f.filename().string());
        const program theirs = from_csv(read(f));
        const program ours = cls == "ScheduleZBVZeroBubble"
                                 ? zb_v{zb_v::order::paper}.program(topology{P}, microbatches(M))
                                 : make_schedule(cls).program(topology{P}, microbatches(M));
        CHECK(ours.stage_rank == theirs.stage_rank);
        CHECK(computes(ours) == computes(theirs));
        ++checked;
    }
    CHECK(checked >= 36);
}

TEST_CASE("tpipe's ZB-V bubble is at most PyTorch's ScheduleZBVZeroBubble order's, P = 2..8, M = P, 2P, 4P",
          "[schedule][pytorch][zb-v]")
{
    int checked = 0, better = 0;
    for (const auto& f : fixture_files(".compute.csv")) {
        const auto [cls, P, M] = parse_name(f);
        if (cls != "ScheduleZBVZeroBubble") continue;
        const auto costs = uniform_costs{1, 1, 1, 0, 0};
        const auto theirs = simulate(from_csv(read(f)), costs);
        const auto ours = simulate(zb_v{}.program(topology{P}, microbatches(M)), costs);
        INFO("P=" << P << " M=" << M << " tpipe " << ours.bubble_fraction << " PyTorch " << theirs.bubble_fraction);
        CHECK(ours.bubble_fraction <= theirs.bubble_fraction + 1e-12);
        better += ours.bubble_fraction < theirs.bubble_fraction - 1e-12;
        for (int r = 0; r < P; ++r) CHECK(ours.peak_activations[r] <= 2 * P);  // 1F1B's peak in half-size chunks
        ++checked;
    }
    CHECK(checked == 21);
    CHECK(better > 0);  // the list-scheduled order wins somewhere, else `best` would be pointless
}

TEST_CASE("the schedule registry is open: aliases, case, a user's schedule, clashes refused", "[schedule][registry]")
{
    CHECK(canonical_schedule_name("Schedule1F1B") == "1f1b");
    CHECK(canonical_schedule_name("scheduleinterleaved1f1b") == "interleaved");
    CHECK(canonical_schedule_name("ZBVZeroBubble") == "zb-v");
    CHECK(canonical_schedule_name("ZB-V") == "zb-v");
    CHECK_THROWS_WITH(make_schedule("pipedream"), Catch::Contains("known schedules: gpipe") &&
                                                      Catch::Contains("dualpipe-v"));
    // The runtime runs OVERLAP_F_B groups (in order), so dualpipe-v is runnable; a schedule
    // registered as not runnable is listed with all = true only.
    tpipe::register_schedule({"simulate-only", {},
                              [](const tpipe::schedule_options&) {
                                  return tpipe::any_schedule(tpipe::gpipe{}, "simulate-only");
                              },
                              1, false, false});
    const auto runnable = schedule_names(), all = schedule_names(true);
    CHECK(std::find(runnable.begin(), runnable.end(), "dualpipe-v") != runnable.end());
    CHECK(std::find(runnable.begin(), runnable.end(), "simulate-only") == runnable.end());
    CHECK(std::find(all.begin(), all.end(), "simulate-only") != all.end());

    struct reverse_gpipe {  // all forwards, then the backwards in reverse order
        std::string_view name() const { return "reverse-gpipe"; }
        tpipe::program program(const topology& t, const scheme& units) const
        {
            microbatch_order order(t.ranks);
            for (int r = 0; r < t.ranks; ++r) {
                for (int m = 0; m < units.microbatches(); ++m) order[r].push_back({r, op::F, m});
                for (int m = units.microbatches() - 1; m >= 0; --m) order[r].push_back({r, op::B, m});
            }
            return expand_slices(t.ranks, loop_placement(t.ranks, t.ranks), units, order);
        }
    };
    static const bool registered =
        register_schedule({"reverse-gpipe", {"ReverseGPipe"}, [](const schedule_options&) { return any_schedule(reverse_gpipe{}); }});
    CHECK(registered);
    CHECK(make_schedule("ReverseGPipe").name() == "reverse-gpipe");
    CHECK(valid(make_schedule("reverse-gpipe").program(topology{3}, microbatches(4, 2))));
    CHECK(stages_per_rank("reverse-gpipe") == 1);
    CHECK(schedule_names().back() == "reverse-gpipe");
    CHECK_THROWS_WITH(register_schedule({"Reverse-GPipe", {}, [](const schedule_options&) { return any_schedule(gpipe{}); }}),
                      Catch::Contains("taken by schedule 'reverse-gpipe'"));
    CHECK_THROWS_WITH(register_schedule({"x", {"schedulegpipe"}, [](const schedule_options&) { return any_schedule(gpipe{}); }}),
                      Catch::Contains("taken by schedule 'gpipe'"));
}

TEST_CASE("receives from a peer are posted in its send order, as PyTorch's transport needs", "[schedule][pytorch][lower]")
{
    // ZB-V on 2 ranks: rank 0 sends rank 1 both forwards (stage 0 -> 1) and gradients (stage 3 -> 2).
    // PyTorch pairs the messages between two ranks in posting order; out of order, same-shaped
    // payloads are swapped silently (its gradients came out wrong before lowering kept this order).
    for (const auto& name : schedule_names(true))
        for (int P : {2, 3, 4}) {
            const auto prog = lower(make_schedule(name).program(topology{P}, microbatches(2 * P)));
            INFO(name << " P=" << P);
            CHECK(detail::receive_order_problem(prog).empty());
            CHECK(valid(prog));
        }
    // The PyTorch-lowered fixtures keep it too, and a program that breaks it is not exported.
    for (const auto& f : fixture_files(".lowered.csv")) CHECK(detail::receive_order_problem(from_csv(read(f))).empty());
    program p = lower(zb_v{}.program(topology{2}, microbatches(2)));
    auto& row = p.actions[1];
    const auto a = std::find(row.begin(), row.end(), action{1, op::RECV_F, 0, 0});
    const auto b = std::find(row.begin(), row.end(), action{1, op::RECV_F, 1, 0});
    REQUIRE((a < b && b != row.end()));
    std::rotate(a, b, b + 1);  // post mb 1's receive first: still valid in tpipe, swapped in PyTorch
    REQUIRE(valid(p));
    CHECK_THROWS_WITH(to_pytorch_csv(p), Catch::Contains("rank 1 posts '1RECV_F1' where rank 0's next message to it "
                                                         "is '0SEND_F0' (for '1RECV_F0')"));
}

TEST_CASE("CSV: a line without actions between ranks is refused, trailing blank lines are padding", "[schedule][csv]")
{
    CHECK(tpipe::from_csv("0F0,0B0\n\n\r\n  \n").ranks == 1);
    CHECK_THROWS_WITH(tpipe::from_csv("0F0,1F0\n\n1B0,0B0\n"), Catch::Contains("CSV line 2 lists no action"));
    // Found by the fuzzer: a line of idle cells was a rank without actions, which to_csv wrote
    // as a blank line, so the round trip lost a rank.
    CHECK_THROWS_WITH(tpipe::from_csv("0F0,0SEND_F0,0RECV_B0,0B0\r\n0RECV_F00\r\n,"), Catch::Contains("CSV line 3 lists no action"));
    CHECK_THROWS_AS(tpipe::from_csv(""), tpipe::parse_error);
    CHECK_THROWS_AS(tpipe::from_csv("\n\n"), tpipe::parse_error);
}

TEST_CASE("CSV: an index no program of this size could use is refused before anything is sized by it", "[schedule][csv]")
{
    // 24 bytes naming microbatch 999999999 once sized tables by it (gigabytes, then bad_alloc).
    CHECK_THROWS_WITH(tpipe::from_csv("0F999999999,0B999999999"), Catch::Contains("larger than the 22 bytes of actions in the file"));
    CHECK_THROWS_WITH(tpipe::from_csv("999F0"), Catch::Contains("index larger"));
    CHECK(tpipe::from_csv("0F0,0F1,0B0,0B1").units.microbatches() == 2);
}
