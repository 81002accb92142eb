// NCCL and peer-copy tests on one GPU ([nccl]); see gpu_nccl_multi.cpp for two or more GPUs.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "gpu_support.hpp"
#include "tpipe/cuda/engine.hpp"
#include "tpipe/cuda/peer_transport.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/nccl/communicator.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

using gpu_test::hvec;

namespace {
template <class T>
std::vector<T> round_trip(const std::vector<T>& h, const std::function<void(std::span<T>)>& on_device)
{
    T* d = nullptr;
    TPIPE_CUDA_TRY(cudaMalloc(&d, h.size() * sizeof(T)));
    TPIPE_CUDA_TRY(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    on_device(std::span<T>(d, h.size()));
    std::vector<T> out(h.size());
    TPIPE_CUDA_TRY(cudaMemcpy(out.data(), d, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
    TPIPE_CUDA_TRY(cudaFree(d));
    return out;
}
} // namespace

TEST_CASE("nccl on one GPU: a one-member communicator: all-reduce and average are the identity, broadcast, barrier, split",
          "[nccl]")
{
    TPIPE_CUDA_TRY(cudaSetDevice(0));
    auto c = tpipe::nccl::communicator::init({}, 1, tpipe::nccl::runtime_api::make_unique_id(), 0);
    CHECK(c.rank() == 0);
    CHECK(c.size() == 1);
    const std::vector<float> f = {1.5f, -2.0f, 3.25f};
    CHECK(round_trip<float>(f, [&](std::span<float> d) {
              tpipe::sync_wait([&]() -> tpipe::task<void> {
                  co_await c.all_reduce_sum(d);
                  co_await c.all_reduce_average(d);
              }());
          }) == f);
    const std::vector<std::int64_t> i = {7, -9, 1LL << 40};
    CHECK(round_trip<std::int64_t>(i, [&](std::span<std::int64_t> d) {
              tpipe::sync_wait([&]() -> tpipe::task<void> { co_await c.all_reduce_sum(d); }());
          }) == i);
    const std::vector<std::byte> b = {std::byte{1}, std::byte{2}, std::byte{3}};
    CHECK(round_trip<std::byte>(b, [&](std::span<std::byte> d) {
              tpipe::sync_wait([&]() -> tpipe::task<void> {
                  co_await c.broadcast(d, 0);
                  co_await c.barrier();
              }());
          }) == b);
    auto sub = c.split(0, 0);
    CHECK(sub.size() == 1);
    CHECK(round_trip<float>(f, [&](std::span<float> d) {
              tpipe::sync_wait([&]() -> tpipe::task<void> { co_await sub.all_reduce_sum(d); }());
          }) == f);
}

TEST_CASE("peer transport on one GPU: ranks sharing the GPU move payloads; the pipeline equals the host run", "[nccl][peer]")
{
    const int P = 3, M = 5;
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(M));
    gpu_test::recorded ref, got;
    gpu_test::run_host(ref, prog, P, {0});
    tpipe::cuda::engine eng({.gpu_of_device = {0, 0, 0}});
    auto pool = tpipe::cuda::make_memory_pool();
    std::vector<gpu_test::pool_ref> refs;
    for (int r = 0; r < P; ++r) refs.push_back({&pool, 0, eng.transfer_stream(r)});
    auto x = tpipe::cuda::make_peer_transport(eng, {0, 1, 2}, std::vector<gpu_test::pool_ref*>{&refs[0], &refs[1], &refs[2]});
    auto pipe = gpu_test::make_pipe(P, refs[0]);
    tpipe::runner r(pipe, prog, eng, x, [] {
        tpipe::run_options o;
        o.device_of_rank = {0, 1, 2};
        return o;
    }());
    r.run(gpu_test::device_io(refs[0], refs[P - 1], 0, got));
    CHECK(got.out == ref.out);
    CHECK(got.dx == ref.dx);
}
