// The CUDA engine on a GPU ([cuda]; skipped without one). The same properties as the CPU tests
// over the fake driver (test_engine.cpp), with real kernels: a pipeline on one GPU with a stream
// per stage equals the sequential run bitwise, empty kernels run through every schedule, a
// launch error is the run's error naming rank, stage, action and unit, and a steady-state
// iteration allocates nothing from the driver.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <vector>

#include "gpu_pipeline.hpp"
#include "tpipe/cuda/engine.hpp"
#include "tpipe/cuda/error_macros.hpp"
#include "tpipe/cuda/runtime_driver.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/schedule/by_name.hpp"

namespace {

constexpr int n = 1000;  // elements per payload

struct grads {
    std::vector<std::vector<float>> da, db;
    friend bool operator==(const grads&, const grads&) = default;
};

//! The stages of an S-stage model whose weight gradients live in cudaMalloc'ed buffers (zeroed).
struct gpu_model {
    std::vector<gpu::stage> stages;
    std::vector<float*> da, db;
    gpu_model(int S, tpipe::cuda::memory_pool& pool, int fail_stage = -1, int fail_microbatch = -1)
    {
        for (int s = 0; s < S; ++s) {
            gpu::stage st(pool, static_cast<float>(s % 2 + 1), static_cast<float>(s + 1), n);
            if (s == fail_stage) st.fail_microbatch = fail_microbatch;
            TPIPE_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&st.da), n * sizeof(float)));
            TPIPE_CUDA_TRY(cudaMalloc(reinterpret_cast<void**>(&st.db), n * sizeof(float)));
            TPIPE_CUDA_TRY(cudaMemset(st.da, 0, n * sizeof(float)));
            TPIPE_CUDA_TRY(cudaMemset(st.db, 0, n * sizeof(float)));
            da.push_back(st.da);
            db.push_back(st.db);
            stages.push_back(std::move(st));
        }
    }
    gpu_model(const gpu_model&) = delete;
    gpu_model& operator=(const gpu_model&) = delete;
    ~gpu_model()
    {
        for (auto* v : {&da, &db})
            for (float* p : *v) TPIPE_CUDA_LOG(cudaFree(p));
    }
    grads gradients() const
    {
        TPIPE_CUDA_TRY(cudaDeviceSynchronize());
        grads g;
        for (float* p : da) g.da.push_back(gpu::to_host(p, n));
        for (float* p : db) g.db.push_back(gpu::to_host(p, n));
        return g;
    }
    //! The stages as a pipeline (moved out of the model; the gradient buffers stay its own).
    tpipe::uniform_pipeline<gpu::stage> pipeline() { return tpipe::uniform_pipeline<gpu::stage>(std::move(stages)); }
};

struct outcome {
    std::map<int, std::vector<float>> outputs, input_grads;  // by microbatch
    grads g;
};

tpipe::run_io<gpu::tensor, gpu::tensor> make_io(tpipe::cuda::memory_pool& pool, outcome& out)
{
    tpipe::run_io<gpu::tensor, gpu::tensor> io;
    io.source = [&pool](const tpipe::unit& u) {
        gpu::tensor x = gpu::make_tensor(pool, n);
        const auto h = gpu::source_values(u, n);
        TPIPE_CUDA_TRY(cudaMemcpyAsync(x.data(), h.data(), n * sizeof(float), cudaMemcpyHostToDevice, tpipe::cuda::current_stream()));
        TPIPE_CUDA_TRY(cudaStreamSynchronize(tpipe::cuda::current_stream()));  // h dies here
        return x;
    };
    io.output_grad = [&pool, &out](const tpipe::unit& u, gpu::tensor&& y) {
        gpu::tensor g = gpu::make_tensor(pool, n);
        kernels::loss_grad(y.data(), g.data(), n, tpipe::cuda::current_stream());
        TPIPE_CUDA_TRY(cudaStreamSynchronize(tpipe::cuda::current_stream()));
        out.outputs[u.microbatch] = gpu::to_host(y.data(), n);
        return g;
    };
    io.input_grad = [&out](const tpipe::unit& u, gpu::tensor&& dx) {
        TPIPE_CUDA_TRY(cudaStreamSynchronize(tpipe::cuda::current_stream()));
        out.input_grads[u.microbatch] = gpu::to_host(dx.data(), n);
    };
    return io;
}

//! The same kernels without a pipeline: every unit through every stage, one call after another,
//! each through the engine's compute on device 0 (one stream).
outcome sequential(tpipe::cuda::engine& eng, int S, int M)
{
    gpu_model m(S, eng.memory());
    outcome out;
    auto io = make_io(eng.memory(), out);
    auto body = [&]() -> tpipe::task<void> {
        co_await eng.loop_of(0).schedule();
        for (int mb = 0; mb < M; ++mb) {
            const tpipe::unit u = tpipe::microbatches(M).at(mb, 0);
            gpu::tensor x = co_await eng.compute(0, [&] { return io.source(u); });
            for (auto& st : m.stages) x = co_await eng.compute(0, [&] { return st.forward(u, std::move(x)); });
            gpu::tensor g = co_await eng.compute(0, [&] { return io.output_grad(u, std::move(x)); });
            for (auto it = m.stages.rbegin(); it != m.stages.rend(); ++it)
                g = co_await eng.compute(0, [&] { return it->backward(u, std::move(g)); });
            co_await eng.compute(0, [&] { io.input_grad(u, std::move(g)); });
        }
    };
    tpipe::sync_wait(body());
    out.g = m.gradients();
    return out;
}

//! One iteration of `prog` on `eng`.
outcome pipelined(tpipe::cuda::engine& eng, const tpipe::program& prog, tpipe::run_options opts = {})
{
    gpu_model m(prog.stages(), eng.memory());
    outcome out;
    auto io = make_io(eng.memory(), out);
    auto pipe = m.pipeline();
    tpipe::run(pipe, prog, eng, io, std::move(opts));
    out.g = m.gradients();
    return out;
}

} // namespace

TEST_CASE("a pipeline on one GPU with a stream per stage equals the sequential run bitwise", "[cuda]")
{
    constexpr int P = 4, M = 8;
    tpipe::cuda::engine eng({.gpu_of_device = {0, 0, 0, 0}});
    for (int d = 1; d < P; ++d) CHECK(eng.compute_stream(d) != eng.compute_stream(0));
    std::map<int, outcome> want;  // by stage count (interleaved schedules have more stages)
    int ran = 0;
    for (const auto& name : tpipe::schedule_names()) {
        tpipe::program prog;
        try {
            prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
        } catch (const tpipe::invalid_argument&) {
            continue;
        }
        CAPTURE(name);
        if (!want.count(prog.stages())) want.emplace(prog.stages(), sequential(eng, prog.stages(), M));
        const outcome& ref = want.at(prog.stages());
        const outcome got = pipelined(eng, prog);
        CHECK(got.outputs == ref.outputs);
        CHECK(got.input_grads == ref.input_grads);
        CHECK(got.g == ref.g);
        CHECK(got.outputs.size() == static_cast<std::size_t>(M));
        ++ran;
    }
    CHECK(ran >= 6);
}

TEST_CASE("empty kernels run through every schedule on 4 streams of one GPU", "[cuda]")
{
    struct empty_stage {
        using input = int;
        using output = int;
        int forward(const tpipe::unit&, int x)
        {
            kernels::empty(tpipe::cuda::current_stream());
            return x + 1;
        }
        int backward(const tpipe::unit&, int g)
        {
            kernels::empty(tpipe::cuda::current_stream());
            return g + 1;
        }
    };
    constexpr int P = 4;
    tpipe::cuda::engine eng({.gpu_of_device = {0, 0, 0, 0}});
    for (const auto& name : tpipe::schedule_names()) {
        tpipe::program prog;
        try {
            prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(2 * P));
        } catch (const tpipe::invalid_argument&) {
            continue;
        }
        CAPTURE(name);
        tpipe::uniform_pipeline<empty_stage> pipe(std::vector<empty_stage>(static_cast<std::size_t>(prog.stages())));
        std::vector<int> outs, dxs;
        tpipe::run_io<int, int> io;
        io.source = [](const tpipe::unit&) { return 0; };
        io.output_grad = [&](const tpipe::unit&, int&& y) { outs.push_back(y); return 0; };
        io.input_grad = [&](const tpipe::unit&, int&& dx) { dxs.push_back(dx); };
        const auto stats = tpipe::run(pipe, prog, eng, io);
        CHECK(stats.actions == tpipe::lower(prog).size());
        CHECK(outs == std::vector<int>(2 * P, prog.stages()));
        CHECK(dxs == std::vector<int>(2 * P, prog.stages()));
    }
}

TEST_CASE("a kernel launch error is the run's error naming rank, stage, action and unit", "[cuda]")
{
    constexpr int P = 4, M = 6;
    for (auto mode : {tpipe::cuda::completion_mode::event_poll, tpipe::cuda::completion_mode::host_func}) {
        tpipe::cuda::engine eng({.gpu_of_device = {0, 0, 0, 0}, .completion = mode});
        const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(M));
        gpu_model m(P, eng.memory(), /*fail_stage=*/2, /*fail_microbatch=*/3);
        outcome out;
        auto io = make_io(eng.memory(), out);
        auto pipe = m.pipeline();
        tpipe::run_options opts;
        opts.watchdog = std::chrono::seconds(20);
        try {
            tpipe::run(pipe, prog, eng, io, opts);
            FAIL("run did not throw");
        } catch (const tpipe::execution_error& e) {
            const std::string w = e.what();
            CAPTURE(w);
            CHECK(e.rank() == 2);
            CHECK(e.stage() == 2);
            CHECK(e.failed_action().kind == tpipe::op::F);
            CHECK(e.failed_unit().microbatch == 3);
            CHECK(w.find("cudaErrorInvalidConfiguration") != std::string::npos);
            CHECK(w.find("device 2 (GPU 0) compute") != std::string::npos);
        }
        // The error was not sticky: the engine runs the next iteration exactly.
        const outcome ok = pipelined(eng, prog);
        CHECK(ok.outputs == sequential(eng, P, M).outputs);
    }
}

TEST_CASE("a steady-state iteration allocates nothing from the driver (pool and events)", "[cuda]")
{
    constexpr int P = 4, M = 8;
    tpipe::cuda::engine eng({.gpu_of_device = {0, 0, 0, 0}});
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(M));
    gpu_model m(P, eng.memory());
    outcome out;
    auto io = make_io(eng.memory(), out);
    auto pipe = m.pipeline();
    tpipe::run(pipe, prog, eng, io);
    tpipe::run(pipe, prog, eng, io);  // the second iteration may still find blocks pending reuse
    const auto mallocs = eng.memory().stats().driver_allocations;
    const auto events = eng.events().created();
    for (int i = 0; i < 5; ++i) tpipe::run(pipe, prog, eng, io);
    CHECK(eng.memory().stats().driver_allocations == mallocs);
    CHECK(eng.events().created() == events);
    CHECK(eng.memory().stats().blocks_in_use == 0);
}

TEST_CASE("a query that finds the work not done leaves no last error behind (the engine's launch check)", "[cuda]")
{
    // The runtime records cudaErrorNotReady as the thread's last error; the driver must clear it,
    // or the cudaGetLastError after the next compute reports a launch that did not fail.
    auto& d = tpipe::cuda::runtime_driver::instance();
    cudaStream_t s = nullptr;
    cudaEvent_t e = nullptr;
    TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    TPIPE_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    (void)cudaGetLastError();
    kernels::busy(1LL << 28, s);  // ~0.15 s at 1.8 GHz: still running when queried
    TPIPE_CUDA_TRY(cudaEventRecord(e, s));
    CHECK(d.event_query(e) == cudaErrorNotReady);
    CHECK(d.stream_query(s) == cudaErrorNotReady);
    CHECK(cudaGetLastError() == cudaSuccess);
    TPIPE_CUDA_TRY(cudaStreamSynchronize(s));
    CHECK(d.event_query(e) == cudaSuccess);
    TPIPE_CUDA_TRY(cudaEventDestroy(e));
    TPIPE_CUDA_TRY(cudaStreamDestroy(s));
}
