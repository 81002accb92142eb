// NCCL between GPUs ([nccl][multi_gpu], hidden: run by the gpu_nccl_multi entry, which asks for two
// GPUs): the NCCL transport and NCCL data parallelism equal the host run. "Processes" are threads,
// one per GPU (NCCL needs a distinct GPU per rank), with the thread control plane of the CPU tests.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "gpu_support.hpp"
#include "thread_control.hpp"
#include "tpipe/cuda/engine.hpp"
#include "tpipe/exec/data_parallel.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/nccl/basic_transport.hpp"
#include "tpipe/nccl/communicator.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

using gpu_test::hvec;

namespace {

int gpus()
{
    int n = 0;
    TPIPE_CUDA_TRY(cudaGetDeviceCount(&n));
    return n;
}

std::vector<std::string> on_threads(int n, const std::function<void(int)>& body)
{
    std::vector<std::string> errors(static_cast<std::size_t>(n));
    std::vector<std::thread> t;
    for (int i = 0; i < n; ++i)
        t.emplace_back([&, i] {
            try {
                TPIPE_CUDA_TRY(cudaSetDevice(i));
                body(i);
            } catch (const std::exception& e) {
                errors[static_cast<std::size_t>(i)] = e.what();
            }
        });
    for (auto& x : t) x.join();
    return errors;
}

} // namespace

TEST_CASE("nccl transport between GPUs: a pipeline with one rank per GPU equals the host run", "[nccl][.multi_gpu]")
{
    const int P = std::min(gpus(), 4), M = 6;
    REQUIRE(P >= 2);
    for (const char* name : {"1f1b", "interleaved"}) {
        CAPTURE(P, name);
        const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
        gpu_test::recorded ref, got;
        gpu_test::run_host(ref, prog, P, {0});
        const auto layout = tpipe::layout::one_rank_per_process(P);
        tpipe::nccl::fake::notice_board board(P);
        const auto id = tpipe::nccl::runtime_api::make_unique_id();
        auto errors = on_threads(P, [&](int me) {
            tpipe::cuda::engine eng({.gpu_of_device = {me}});
            auto pool = tpipe::cuda::make_memory_pool();
            gpu_test::pool_ref ref{&pool, me, eng.transfer_stream(0)};
            tpipe::nccl::fake::control ctl(layout, me, board);
            tpipe::nccl::basic_transport<tpipe::nccl::runtime_api, tpipe::nccl::fake::control, gpu_test::pool_ref> x({}, id, ctl, ref);
            auto pipe = gpu_test::make_pipe(prog.stages(), ref);
            tpipe::runner r(pipe, prog, eng, x, [] {
                tpipe::run_options o;
                o.watchdog = std::chrono::seconds(60);
                return o;
            }());
            r.run(gpu_test::device_io(ref, ref, 0, got));
        });
        for (const auto& e : errors) CHECK(e.empty());
        CHECK(got.out == ref.out);
        CHECK(got.dx == ref.dx);
    }
}

TEST_CASE("nccl data parallelism between GPUs: replicas' gradients sum to the host run over all their samples",
          "[nccl][.multi_gpu]")
{
    const int D = std::min(gpus(), 4), P = 2, M = 4;
    REQUIRE(D >= 2);
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(M));
    std::vector<int> all(static_cast<std::size_t>(D));
    for (int d = 0; d < D; ++d) all[d] = d;
    gpu_test::recorded ref;
    gpu_test::run_host(ref, prog, P, all);
    std::vector<tpipe::nccl::unique_id> ids;
    for (int s = 0; s < P; ++s) ids.push_back(tpipe::nccl::runtime_api::make_unique_id());
    std::vector<std::vector<hvec>> grads(static_cast<std::size_t>(D));
    auto errors = on_threads(D, [&](int d) {
        // The replica's two ranks share its GPU and one loop thread: NCCL forbids issuing on two
        // communicators of one GPU from two threads at once (each stage has its own communicator).
        tpipe::cuda::engine eng({.gpu_of_device = {d, d}, .threads = 1});
        auto pool = tpipe::cuda::make_memory_pool();
        gpu_test::pool_ref ref{&pool, d, eng.transfer_stream(0)};
        std::vector<tpipe::nccl::communicator> comms;
        for (int s = 0; s < P; ++s) comms.push_back(tpipe::nccl::communicator::init({}, D, ids[s], d));
        auto pipe = gpu_test::make_pipe(P, ref);
        tpipe::data_parallel dp(pipe, std::vector<tpipe::nccl::communicator*>{&comms[0], &comms[1]}, {.average = false});
        gpu_test::recorded mine;
        tpipe::run_options o;
        o.after_backward = dp.hook();
        o.device_of_rank = {0, 1};
        tpipe::run(pipe, prog, eng, gpu_test::device_io(ref, ref, d, mine), o);
        TPIPE_CUDA_TRY(cudaDeviceSynchronize());
        pipe.visit_stages([&](std::size_t, auto& s) { grads[d].push_back(gpu_test::download(s.grad)); });
    });
    for (const auto& e : errors) CHECK(e.empty());
    for (int d = 0; d < D; ++d) CHECK(grads[d] == ref.grads);
}
