// tpipe::layout over whole small domains (t, K, d in 1..4): every coordinate is in exactly one
// group of each kind, groups have their sizes, colours and positions are a split's arguments, the
// default order is Megatron's, explicit maps are taken and checked, bad input is refused. And
// tpipe::split_groups over a thread_group gives every group's communicator exactly its members.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/exec/group_communicators.hpp"
#include "tpipe/exec/layout.hpp"

using tpipe::axes;
using tpipe::coordinate;
using tpipe::group_kind;
using tpipe::layout;

namespace {

std::vector<axes> small_domain()
{
    std::vector<axes> out;
    for (int t = 1; t <= 4; ++t)
        for (int K = 1; K <= 4; ++K)
            for (int d = 1; d <= 4; ++d) out.push_back({.tensor_ranks = t, .pipeline_ranks = K, .replicas = d});
    return out;
}

std::vector<coordinate> every_coordinate(const axes& a)
{
    std::vector<coordinate> out;
    for (int d = 0; d < a.replicas; ++d)
        for (int r = 0; r < a.pipeline_ranks; ++r)
            for (int k = 0; k < a.tensor_ranks; ++k) out.push_back({d, r, k});
    return out;
}

//! The axis a group of `kind` runs along is the only one that varies in it.
bool same_but_axis(group_kind kind, const coordinate& a, const coordinate& b)
{
    switch (kind) {
    case group_kind::tensor: return a.replica == b.replica && a.rank == b.rank;
    case group_kind::data: return a.rank == b.rank && a.tensor_rank == b.tensor_rank;
    case group_kind::pipeline: return a.replica == b.replica && a.tensor_rank == b.tensor_rank;
    }
    return false;
}

std::string message_of(auto&& f)
{
    try {
        f();
    } catch (const tpipe::invalid_argument& e) {
        return e.what();
    }
    return "(nothing thrown)";
}

} // namespace

TEST_CASE("layout: every coordinate is in exactly one group of each kind, of the right size", "[exec][layout]")
{
    for (const axes& a : small_domain()) {
        const layout l = layout::one_rank_per_process(a);
        CAPTURE(a.text());
        const auto all = every_coordinate(a);
        for (group_kind kind : {group_kind::tensor, group_kind::data, group_kind::pipeline}) {
            const int expected_size = kind == group_kind::tensor ? a.tensor_ranks : kind == group_kind::data ? a.replicas : a.pipeline_ranks;
            REQUIRE(l.group_size(kind) == expected_size);
            REQUIRE(l.groups(kind) * l.group_size(kind) == a.size());
            std::vector<int> seen(all.size(), 0);
            std::set<int> colours;
            for (int g = 0; g < l.groups(kind); ++g) {
                // The g-th group, found through a member: the first coordinate of that colour.
                const auto first = std::find_if(all.begin(), all.end(), [&](const coordinate& c) { return l.colour(kind, c) == g; });
                REQUIRE(first != all.end());
                const auto members = l.group(kind, *first);
                REQUIRE(static_cast<int>(members.size()) == expected_size);
                for (int i = 0; i < expected_size; ++i) {
                    const coordinate& m = members[static_cast<std::size_t>(i)];
                    REQUIRE(same_but_axis(kind, m, *first));
                    REQUIRE(l.colour(kind, m) == g);
                    REQUIRE(l.position(kind, m) == i);  // a group is ordered along its axis
                    REQUIRE(l.group(kind, m) == members);
                    ++seen[static_cast<std::size_t>(l.index(m))];
                }
                colours.insert(g);
            }
            REQUIRE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
            REQUIRE(static_cast<int>(colours.size()) == l.groups(kind));
            for (const coordinate& c : all) {
                REQUIRE(l.colour(kind, c) >= 0);
                REQUIRE(l.colour(kind, c) < l.groups(kind));
            }
        }
        // The named groups are the groups of their kind.
        for (const coordinate& c : all) {
            REQUIRE(l.tensor_group(c.replica, c.rank) == l.group(group_kind::tensor, c));
            REQUIRE(l.data_group(c.rank, c.tensor_rank) == l.group(group_kind::data, c));
            REQUIRE(l.pipeline(c.replica, c.tensor_rank) == l.group(group_kind::pipeline, c));
        }
    }
}

TEST_CASE("layout: the default order puts tensor ranks nearest, then pipeline ranks, then replicas", "[exec][layout]")
{
    for (const axes& a : small_domain()) {
        const layout l = layout::one_rank_per_process(a);
        const layout one = layout::single_process(a);
        CAPTURE(a.text());
        REQUIRE(l.processes() == a.size());
        REQUIRE(one.processes() == 1);
        int i = 0;
        for (const coordinate& c : every_coordinate(a)) {  // d slowest, k fastest
            REQUIRE(l.index(c) == i);
            REQUIRE(l.at(i) == c);
            REQUIRE(l.process_of(c) == (c.replica * a.pipeline_ranks + c.rank) * a.tensor_ranks + c.tensor_rank);
            REQUIRE(l.coordinates_of(i) == std::vector<coordinate>{c});
            REQUIRE(one.process_of(c) == 0);
            ++i;
        }
        REQUIRE(one.coordinates_of(0) == every_coordinate(a));
        // A pipeline's processes: tensor rank k of stage r and of stage r + 1 are t processes apart.
        for (int d = 0; d < a.replicas; ++d)
            for (int k = 0; k < a.tensor_ranks; ++k) {
                const auto p = l.processes_of(l.pipeline(d, k));
                for (int r = 0; r < a.pipeline_ranks; ++r)
                    REQUIRE(p[static_cast<std::size_t>(r)] == (d * a.pipeline_ranks + r) * a.tensor_ranks + k);
            }
    }
    // One tensor rank is the former two-axis layout: rank r of replica d on process d * P + r.
    const layout two = layout::one_rank_per_process(3, 2);
    REQUIRE(two.sizes() == axes{.tensor_ranks = 1, .pipeline_ranks = 3, .replicas = 2});
    for (int d = 0; d < 2; ++d)
        for (int r = 0; r < 3; ++r) REQUIRE(two.process_of(d, r) == d * 3 + r);
    REQUIRE(two.replicas_of(4) == std::vector<int>{1});
    REQUIRE(layout::single_process(3, 2).replicas_of(0) == std::vector<int>{0, 1});
}

TEST_CASE("layout: any explicit map is taken as given", "[exec][layout]")
{
    std::mt19937 rng(7);
    for (const axes& a : small_domain()) {
        CAPTURE(a.text());
        // One coordinate per process, in a random order.
        std::vector<coordinate> of_process = every_coordinate(a);
        std::shuffle(of_process.begin(), of_process.end(), rng);
        const layout l = layout::from_coordinates(a, of_process);
        REQUIRE(l.processes() == a.size());
        for (int p = 0; p < a.size(); ++p) {
            REQUIRE(l.process_of(of_process[static_cast<std::size_t>(p)]) == p);
            REQUIRE(l.coordinates_of(p) == std::vector<coordinate>{of_process[static_cast<std::size_t>(p)]});
        }
        // Several coordinates per process: the pipeline's ranks in pairs, as process_of says.
        std::vector<int> process_of(static_cast<std::size_t>(a.size()));
        for (int i = 0; i < a.size(); ++i) process_of[static_cast<std::size_t>(i)] = i / 2;
        const layout pairs(a, process_of);
        REQUIRE(pairs.processes() == (a.size() + 1) / 2);
        for (int i = 0; i < a.size(); ++i) REQUIRE(pairs.process_of(pairs.at(i)) == i / 2);
    }
}

TEST_CASE("layout: bad sizes, maps and coordinates are refused with a sentence naming them", "[exec][layout]")
{
    const axes a{.tensor_ranks = 2, .pipeline_ranks = 3, .replicas = 1};
    CHECK(message_of([] { (void)layout::one_rank_per_process(axes{.tensor_ranks = 0, .pipeline_ranks = 2}); }) ==
          "layout: every axis needs at least 1, got 0 tensor ranks x 2 pipeline ranks x 1 replica");
    CHECK(message_of([] { (void)layout::single_process(2, -1); }) ==
          "layout: every axis needs at least 1, got 1 tensor rank x 2 pipeline ranks x -1 replicas");
    CHECK(message_of([&] { layout(a, {0, 1, 2}); }) ==
          "layout: process_of names 3 coordinates, but 2 tensor ranks x 3 pipeline ranks x 1 replica have 6");
    CHECK(message_of([&] { layout(a, {0, 1, 2, 3, -1, 4}); }) == "layout: process numbers must be >= 0, got -1");
    CHECK(message_of([&] { layout(a, {0, 1, 2, 3, 5, 5}); }) ==
          "layout: process 4 runs no coordinate, but processes up to 5 do; number the processes 0..5 without gaps");
    CHECK(message_of([&] { layout::from_coordinates(a, {{0, 0, 0}, {0, 0, 1}}); }) ==
          "layout: 2 processes are given a coordinate, but 2 tensor ranks x 3 pipeline ranks x 1 replica need one process "
          "for each of their 6 coordinates");
    CHECK(message_of([&] { layout::from_coordinates(a, {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {0, 2, 0}, {0, 1, 0}}); }) ==
          "layout: (replica 0, rank 1, tensor rank 0) is given to process 2 and to process 5; each coordinate runs on one process");
    CHECK(message_of([&] { layout::from_coordinates(a, {{0, 0, 0}, {0, 0, 1}, {0, 1, 0}, {0, 1, 1}, {0, 2, 0}, {0, 2, 2}}); }) ==
          "layout::from_coordinates: (replica 0, rank 2, tensor rank 2) is outside 2 tensor ranks x 3 pipeline ranks x 1 replica");
    const layout l = layout::one_rank_per_process(a);
    CHECK(message_of([&] { (void)l.process_of(1, 0, 0); }) ==
          "layout: (replica 1, rank 0, tensor rank 0) is outside 2 tensor ranks x 3 pipeline ranks x 1 replica");
    CHECK(message_of([&] { (void)l.tensor_group(0, 3); }) ==
          "layout: (replica 0, rank 3, tensor rank 0) is outside 2 tensor ranks x 3 pipeline ranks x 1 replica");
    CHECK(message_of([&] { (void)l.at(6); }) == "layout: index 6 is outside [0, 6) for 2 tensor ranks x 3 pipeline ranks x 1 replica");
}

namespace {

//! Every coordinate of `l` on a thread of its own with its member of one thread_group: after
//! split_groups, each all-reduces 1 << index over each of its groups. The sum names exactly the
//! group's members (a bit each), so it must equal the closed form from the layout's own lists.
void check_thread_groups(const axes& a)
{
    const layout l = layout::single_process(a);
    tpipe::thread_group all(a.size());
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(a.size()));
    std::vector<std::string> wrong(static_cast<std::size_t>(a.size()));
    std::vector<std::thread> threads;
    for (int i = 0; i < a.size(); ++i)
        threads.emplace_back([&, i] {
            try {
                const coordinate me = l.at(i);
                auto g = tpipe::split_groups(all.member(i), l, me);
                auto bits_of = [&](const std::vector<coordinate>& members) {
                    std::int64_t b = 0;
                    for (const coordinate& c : members) b |= std::int64_t{1} << l.index(c);
                    return b;
                };
                auto sum = [](tpipe::thread_communicator& c, std::int64_t v) -> tpipe::task<std::int64_t> {
                    co_await c.all_reduce_sum(std::span<std::int64_t>(&v, 1));
                    co_return v;
                };
                const std::int64_t mine = std::int64_t{1} << i;
                struct check {
                    tpipe::thread_communicator* c;
                    group_kind kind;
                } checks[] = {{&g.tensor, group_kind::tensor}, {&g.data, group_kind::data}, {&g.pipeline, group_kind::pipeline}};
                for (const auto& [c, kind] : checks) {
                    const std::int64_t got = tpipe::sync_wait(sum(*c, mine));
                    if (got != bits_of(l.group(kind, me)) || c->size() != l.group_size(kind) || c->rank() != l.position(kind, me))
                        wrong[static_cast<std::size_t>(i)] += " group " + std::to_string(static_cast<int>(kind)) + " of " + me.text();
                }
            } catch (...) {
                errors[static_cast<std::size_t>(i)] = std::current_exception();
            }
        });
    for (auto& t : threads) t.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    for (const auto& w : wrong) REQUIRE(w.empty());
}

} // namespace

TEST_CASE("split_groups over a thread_group gives every group's communicator exactly its members", "[exec][layout][comm]")
{
    for (const axes& a : {axes{2, 2, 1}, axes{1, 2, 2}, axes{2, 1, 2}, axes{2, 2, 2}, axes{3, 2, 1}, axes{1, 1, 1}}) {
        CAPTURE(a.text());
        check_thread_groups(a);
    }
    tpipe::thread_group three(3);
    CHECK(message_of([&] { (void)tpipe::split_groups(three.member(0), layout::single_process(axes{2, 2, 1}), coordinate{}); }) ==
          "split_groups: the parent communicator has 3 members, but the layout's 2 tensor ranks x 2 pipeline ranks x 1 replica "
          "have 4 coordinates; each coordinate's member calls split_groups once");
}
