#include <catch2/catch.hpp>

#include <chrono>
#include <span>
#include <thread>
#include <vector>

#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/exec/data_parallel.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

#include "affine.hpp"

namespace {

using tpipe_test::affine;
using tpipe_test::dvec;
using tpipe_test::affine_stages;

//! The input of sample `row` of replica `replica`.
dvec sample(int replica, int row) { return dvec{double(replica * 10 + row), double(row - replica), 1.0}; }

tpipe::io_for<tpipe::uniform_pipeline<affine>> io_for_replica(int replica, int rows_per_mb)
{
    tpipe::io_for<tpipe::uniform_pipeline<affine>> io;
    io.source = [=](const tpipe::unit& u) { return sample(replica, u.microbatch * rows_per_mb); };
    io.output_grad = [](const tpipe::unit&, dvec&& y) {
        for (double& v : y) v = std::fmod(v, 5.0) + 1;
        return std::move(y);
    };
    return io;
}

} // namespace

TEST_CASE("data parallel over threads: D replicas sum to one replica that saw all their samples, bitwise equal",
          "[exec][data_parallel]")
{
    const int P = 2, M = 4;
    for (int D : {1, 2, 3}) {
        for (const char* name : {"1f1b", "zb-h1", "interleaved"}) {
            CAPTURE(D, name);
            const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
            const int stages = prog.stages();
            // Reference: one replica that runs every replica's microbatches.
            auto ref_stages = affine_stages(stages);
            {
                tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
                    std::vector<std::reference_wrapper<affine>>(ref_stages.begin(), ref_stages.end()));
                tpipe::cpu_engine eng(P);
                for (int d = 0; d < D; ++d) {
                    tpipe::io_for<decltype(pipe)> io;
                    const auto one = io_for_replica(d, 1);
                    io.source = one.source;
                    io.output_grad = one.output_grad;
                    tpipe::run(pipe, prog, eng, io);
                }
            }
            // D replicas on threads, one thread_group per stage.
            std::vector<std::vector<affine>> replica(static_cast<std::size_t>(D));
            for (auto& r : replica) r = affine_stages(stages);
            std::vector<std::unique_ptr<tpipe::thread_group>> groups;
            for (int s = 0; s < stages; ++s) groups.push_back(std::make_unique<tpipe::thread_group>(D));
            std::vector<std::vector<tpipe::thread_communicator>> members(static_cast<std::size_t>(D));
            for (int d = 0; d < D; ++d)
                for (int s = 0; s < stages; ++s) members[d].push_back(groups[s]->member(d));
            tpipe::cpu_engine eng(P * D);
            std::vector<std::thread> threads;
            std::vector<std::string> errors(static_cast<std::size_t>(D));
            for (int d = 0; d < D; ++d)
                threads.emplace_back([&, d] {
                    try {
                        tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
                            std::vector<std::reference_wrapper<affine>>(replica[d].begin(), replica[d].end()));
                        std::vector<tpipe::thread_communicator*> comms;
                        for (auto& m : members[d]) comms.push_back(&m);
                        tpipe::data_parallel dp(pipe, comms, {.bucket_bytes = sizeof(double), .average = false});
                        tpipe::run_options opts;
                        opts.after_backward = dp.hook();
                        for (int r = 0; r < P; ++r) opts.device_of_rank.push_back(d * P + r);
                        tpipe::run(pipe, prog, eng, io_for_replica(d, 1), opts);
                    } catch (const std::exception& e) {
                        errors[d] = e.what();
                    }
                });
            for (auto& t : threads) t.join();
            for (int d = 0; d < D; ++d) {
                CHECK(errors[d].empty());
                for (int s = 0; s < stages; ++s) CHECK(replica[d][s].grad == ref_stages[s].grad);
            }
        }
    }
}

TEST_CASE("a replica that fails cancels the others' all-reduce instead of leaving them waiting", "[exec][data_parallel]")
{
    // Concurrent: the replicas run together; sequential: replica 1 fails and returns before
    // replica 0 starts the iteration (its reset must not clear the cancellation).
    const bool sequential = GENERATE(false, true);
    CAPTURE(sequential);
    const int P = 2, D = 2;
    const auto prog = tpipe::one_f_one_b{}.program(tpipe::topology{P}, tpipe::microbatches(4));
    std::vector<std::vector<affine>> replica(D, affine_stages(P));
    replica[1][0].fail_at_microbatch = 3;  // replica 1's stage 0 fails at its last backward
    std::vector<std::unique_ptr<tpipe::thread_group>> groups;
    for (int s = 0; s < P; ++s) groups.push_back(std::make_unique<tpipe::thread_group>(D));
    std::vector<std::vector<tpipe::thread_communicator>> members(D);
    for (int d = 0; d < D; ++d)
        for (int s = 0; s < P; ++s) members[d].push_back(groups[s]->member(d));
    tpipe::cpu_engine eng(P * D);
    std::vector<std::string> errors(D);
    std::vector<std::thread> threads;
    auto replica_run = [&](int d) {
        tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
            std::vector<std::reference_wrapper<affine>>(replica[d].begin(), replica[d].end()));
        std::vector<tpipe::thread_communicator*> comms;
        for (auto& m : members[d]) comms.push_back(&m);
        tpipe::data_parallel dp(pipe, comms);
        tpipe::run_options opts;
        opts.after_backward = dp.hook();
        opts.watchdog = std::chrono::seconds(20);
        for (int r = 0; r < P; ++r) opts.device_of_rank.push_back(d * P + r);
        try {
            tpipe::run(pipe, prog, eng, io_for_replica(d, 1), opts);
        } catch (const std::exception& e) {
            errors[d] = e.what();
        }
    };
    const auto start = std::chrono::steady_clock::now();
    if (sequential) {
        replica_run(1);
        replica_run(0);
    }
    for (int d = 0; d < D && !sequential; ++d) threads.emplace_back(replica_run, d);
    for (auto& t : threads) t.join();
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    CHECK_THAT(errors[1], Catch::Contains("injected fault"));
    CHECK_THAT(errors[0], Catch::Contains("data-parallel all-reduce was cancelled from outside this runner (another replica"));  // told, not left waiting
}

TEST_CASE("data parallel, sharded: each member's bucket segments hold the all-reduce's bits; all_gather gives it whole",
          "[exec][data_parallel][sharded]")
{
    const int P = 2, D = 3;
    const std::size_t n = 11, bucket = 4;  // buckets of 4, 4 and 3 elements
    // Replica d's gradients of stage s: values whose sums round differently in different orders.
    auto grads = [](int d, int s) {
        std::vector<double> g(n);
        for (std::size_t i = 0; i < n; ++i) g[i] = 1.0 / (3.0 + double(d) * 7 + double(i) + double(s) * 0.1) * (d % 2 ? 1e8 : 1);
        return g;
    };
    // Reduces every stage on D threads with `shard`; `after(d, dp, stages)` runs on replica d's thread.
    auto reduce_all = [&](bool shard, auto after) {
        std::vector<std::vector<affine>> replica(D, affine_stages(P));
        std::vector<std::unique_ptr<tpipe::thread_group>> groups;
        for (int s = 0; s < P; ++s) groups.push_back(std::make_unique<tpipe::thread_group>(D));
        std::vector<std::thread> threads;
        for (int d = 0; d < D; ++d)
            threads.emplace_back([&, d] {
                for (int s = 0; s < P; ++s) replica[d][s].grad = grads(d, s);
                tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
                    std::vector<std::reference_wrapper<affine>>(replica[d].begin(), replica[d].end()));
                std::vector<tpipe::thread_communicator> members;
                for (auto& g : groups) members.push_back(g->member(d));
                std::vector<tpipe::thread_communicator*> comms;
                for (auto& m : members) comms.push_back(&m);
                tpipe::data_parallel dp(pipe, comms, {.bucket_bytes = bucket * sizeof(double), .shard = shard});
                for (int s = 0; s < P; ++s) tpipe::sync_wait(dp.reduce(s));
                after(d, dp, replica[d]);
            });
        for (auto& t : threads) t.join();
        return replica;
    };
    const auto whole = reduce_all(false, [](int, auto&, auto&) {});
    std::vector<std::vector<std::vector<tpipe::element_range>>> owned(D, std::vector<std::vector<tpipe::element_range>>(P));
    const auto sharded = reduce_all(true, [&](int d, auto& dp, std::vector<affine>& stages) {
        for (int s = 0; s < P; ++s) owned[d][s] = dp.template shard<double>(s, n);
        (void)stages;
    });
    for (int s = 0; s < P; ++s) {
        std::vector<int> holders(n, 0);
        for (int d = 0; d < D; ++d) {
            CHECK(owned[d][s] == tpipe::bucket_shard(n, bucket, D, d));
            for (auto r : owned[d][s])
                for (std::size_t i = r.begin; i < r.begin + r.size; ++i) {
                    ++holders[i];
                    CHECK(sharded[d][s].grad[i] == whole[0][s].grad[i]);  // bitwise: == on doubles
                }
        }
        CHECK(holders == std::vector<int>(n, 1));  // every element has exactly one holder
    }
    // all_gather of the gradients themselves (as of parameters after a step): the whole all-reduce.
    const auto gathered = reduce_all(true, [&](int, auto& dp, std::vector<affine>& stages) {
        for (int s = 0; s < P; ++s) tpipe::sync_wait(dp.all_gather(s, std::span<double>(stages[s].grad)));
    });
    for (int d = 0; d < D; ++d)
        for (int s = 0; s < P; ++s) CHECK(gathered[d][s].grad == whole[0][s].grad);
    // Only the buckets that meet a range: [5, 6) lies in bucket 1 (elements 4..7).
    const auto partly = reduce_all(true, [&](int, auto& dp, std::vector<affine>& stages) {
        tpipe::sync_wait(dp.all_gather(0, std::span<double>(stages[0].grad), tpipe::element_range{5, 1}));
    });
    for (int d = 0; d < D; ++d)
        for (std::size_t i = 4; i < 8; ++i) CHECK(partly[d][0].grad[i] == whole[0][0].grad[i]);
    CHECK(tpipe::bucket_shard(11, 4, 3, 2) == std::vector<tpipe::element_range>{{3, 1}, {7, 1}, {10, 1}});
    CHECK(tpipe::bucket_shard(11, 4, 3, 0) == std::vector<tpipe::element_range>{{0, 2}, {4, 2}, {8, 1}});
}
