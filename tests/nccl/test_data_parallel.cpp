#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "affine.hpp"
#include "members.hpp"
#include "tpipe/exec/data_parallel.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

using nccl_test::affine;
using nccl_test::dvec;
using nccl_test::affine_stages;

tpipe::io_for<tpipe::uniform_pipeline<std::reference_wrapper<affine>>> io_for_replica(int replica)
{
    tpipe::io_for<tpipe::uniform_pipeline<std::reference_wrapper<affine>>> io;
    io.source = [=](const tpipe::unit& u) { return nccl_test::sample(replica, u.microbatch); };
    io.output_grad = [](const tpipe::unit&, dvec&& y) { return nccl_test::loss_grad(std::move(y)); };
    return io;
}

} // namespace

TEST_CASE("data parallel runs unchanged over the NCCL communicator: D replicas sum to one replica that saw all samples",
          "[nccl][data_parallel]")
{
    const int P = 2, M = 4;
    for (int D : {2, 3}) {
        for (const char* name : {"1f1b", "interleaved"}) {
            CAPTURE(D, name);
            const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
            const int stages = prog.stages();
            auto ref = affine_stages(stages);
            {
                tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(std::vector<std::reference_wrapper<affine>>(ref.begin(), ref.end()));
                tpipe::cpu_engine eng(P);
                for (int d = 0; d < D; ++d) tpipe::run(pipe, prog, eng, io_for_replica(d));
            }
            tpipe::nccl::fake::world w;
            std::vector<std::vector<tpipe::nccl::fake::communicator>> of_stage;  // [stage][replica]
            for (int s = 0; s < stages; ++s) of_stage.push_back(tpipe::nccl::fake::members(w, D));
            std::vector<std::vector<affine>> replica(static_cast<std::size_t>(D));
            for (auto& r : replica) r = affine_stages(stages);
            tpipe::cpu_engine eng(P * D);
            auto errors = tpipe::nccl::fake::on_threads(D, [&](int d) {
                tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
                    std::vector<std::reference_wrapper<affine>>(replica[d].begin(), replica[d].end()));
                std::vector<tpipe::nccl::fake::communicator*> comms;
                for (int s = 0; s < stages; ++s) comms.push_back(&of_stage[s][d]);
                tpipe::data_parallel dp(pipe, comms, {.bucket_bytes = sizeof(double), .average = false});
                tpipe::run_options opts;
                opts.after_backward = dp.hook();
                for (int r = 0; r < P; ++r) opts.device_of_rank.push_back(d * P + r);
                tpipe::run(pipe, prog, eng, io_for_replica(d), opts);
                tpipe::run(pipe, prog, eng, io_for_replica(d), opts);  // a second iteration on the same communicators
            });
            for (int d = 0; d < D; ++d) {
                CHECK(errors[d].empty());
                for (int s = 0; s < stages; ++s) {
                    // Two iterations: grads were reduced after the first, accumulated, reduced again.
                    std::vector<double> want = ref[s].grad;
                    for (double& g : want) g = g * (D + 1);
                    CHECK(replica[d][s].grad == want);
                }
            }
        }
    }
}

TEST_CASE("data parallel averages with the NCCL communicator's all_reduce_average, not on the host", "[nccl][data_parallel]")
{
    const int P = 2, D = 2;
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(4));
    auto ref = affine_stages(P);
    {
        tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(std::vector<std::reference_wrapper<affine>>(ref.begin(), ref.end()));
        tpipe::cpu_engine eng(P);
        for (int d = 0; d < D; ++d) tpipe::run(pipe, prog, eng, io_for_replica(d));
    }
    tpipe::nccl::fake::world w;
    std::vector<std::vector<tpipe::nccl::fake::communicator>> of_stage;
    for (int s = 0; s < P; ++s) of_stage.push_back(tpipe::nccl::fake::members(w, D));
    std::vector<std::vector<affine>> replica(D, affine_stages(P));
    tpipe::cpu_engine eng(P * D);
    auto errors = tpipe::nccl::fake::on_threads(D, [&](int d) {
        tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(std::vector<std::reference_wrapper<affine>>(replica[d].begin(), replica[d].end()));
        std::vector<tpipe::nccl::fake::communicator*> comms{&of_stage[0][d], &of_stage[1][d]};
        tpipe::data_parallel dp(pipe, comms, {.average = true});
        tpipe::run_options opts;
        opts.after_backward = dp.hook();
        opts.device_of_rank = {d * P, d * P + 1};
        tpipe::run(pipe, prog, eng, io_for_replica(d), opts);
    });
    for (int d = 0; d < D; ++d) {
        CHECK(errors[d].empty());
        for (int s = 0; s < P; ++s) CHECK(replica[d][s].grad == std::vector<double>{ref[s].grad[0] / D, ref[s].grad[1] / D});
    }
    CHECK(w.averages == D * P);  // one bucket per stage and replica, each an ncclAvg all-reduce
}
