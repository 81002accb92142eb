// The CUDA engine over the fake driver, through tpipe::run: every schedule equals the sequential
// run and the cpu_engine run, in both completion modes; a failed kernel or launch is the run's
// one execution_error naming rank, stage, action and unit; a GPU that never finishes is the
// watchdog's error naming who waits for what; completions from the driver thread are never lost.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "gpu_stages.hpp"
#include "tpipe/cuda/basic_engine.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/when_all.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

using engine_t = tpipe::cuda::basic_engine<fake::driver>;
using tpipe::cuda::completion_mode;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

//! P ranks on 2 GPUs (ranks 0..P/2-1 on GPU 0), one stream each.
engine_t make_engine(fake::driver& d, int P, completion_mode mode, int threads = 0)
{
    std::vector<int> gpus;
    for (int r = 0; r < P; ++r) gpus.push_back(r * 2 / P);
    return engine_t(d, {.gpu_of_device = gpus, .threads = threads, .completion = mode});
}

const char* name_of(completion_mode m) { return m == completion_mode::event_poll ? "event_poll" : "host_func"; }

} // namespace

TEST_CASE("every schedule on the CUDA engine equals the sequential run and the cpu_engine run", "[cuda][cpu][engine]")
{
    int ran = 0;
    for (completion_mode mode : {completion_mode::event_poll, completion_mode::host_func}) {
        for (int P = 2; P <= 4; ++P) {
            fake::driver d(2);
            d.start_device();  // kernels complete on a device thread, host functions run there
            engine_t eng = make_engine(d, P, mode);
            tpipe::cpu_engine cpu(P);
            for (const auto& name : tpipe::schedule_names()) {
                for (const tpipe::scheme& units : {tpipe::microbatch_slicer{2 * P}.scheme({2 * P, 6}),
                                                   tpipe::uniform_grid_slicer{P, 2}.scheme({P, 6}),
                                                   tpipe::token_slicer{{1, 2, 3}}.scheme({1, 6})}) {
                    tpipe::program prog;
                    try {
                        prog = tpipe::make_schedule(name).program(tpipe::topology{P}, units);
                    } catch (const tpipe::invalid_argument&) {
                        continue;  // this schedule does not take this shape
                    }
                    CAPTURE(name_of(mode), name, P, units.units());
                    auto ref = synth::make_uniform<true>(prog.stages());
                    const auto want = synth::sequential(ref, prog.units);
                    auto on_cpu = synth::make_uniform<true>(prog.stages());
                    const auto cpu_got = synth::run_collect(on_cpu, prog, cpu);
                    auto on_gpu = synth::make_gpu_uniform<true>(prog.stages(), d);
                    const std::size_t launched = d.launches();
                    const auto got = synth::run_collect(on_gpu, prog, eng);
                    CHECK(got.outputs == want.outputs);
                    CHECK(got.input_grads == want.input_grads);
                    CHECK(got.states == want.states);
                    CHECK(got.outputs == cpu_got.outputs);
                    CHECK(got.states == cpu_got.states);
                    // One kernel per compute action, every one of them awaited.
                    std::size_t computes = 0;
                    for (const auto& row : prog.actions)
                        for (const auto& a : row) computes += tpipe::is_compute(a.kind) ? 1 : 0;
                    CHECK(d.launches() - launched == computes);
                    ++ran;
                }
            }
            // Steady state: the completions reuse their events (and host-function slots).
            const auto events = eng.events().created();
            auto again = synth::make_gpu_uniform<true>(P, d);
            const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(2 * P));
            for (int i = 0; i < 3; ++i) {
                for (auto* s : synth::stage_list(again)) s->new_iteration();
                synth::run_collect(again, prog, eng);
            }
            CHECK(eng.events().created() == events);
            CHECK(events <= static_cast<std::size_t>(2 * P));
        }
    }
    CHECK(ran >= 45);
}

TEST_CASE("ranks sharing a GPU, and fewer loops than devices, stay exact", "[cuda][cpu][engine]")
{
    fake::driver d(1);
    d.start_device();
    engine_t eng(d, {.gpu_of_device = {0, 0, 0, 0}, .threads = 2});
    CHECK(eng.threads() == 2);
    CHECK(&eng.loop_of(0) == &eng.loop_of(1));
    CHECK(&eng.loop_of(1) != &eng.loop_of(2));
    for (int dev = 0; dev < 4; ++dev) {
        CHECK(eng.gpu_of(dev) == 0);
        CHECK(eng.compute_stream(dev) != eng.transfer_stream(dev));
        for (int other = 0; other < dev; ++other) CHECK(eng.compute_stream(dev) != eng.compute_stream(other));
    }
    for (const char* name : {"gpipe", "1f1b", "zb-h1", "interleaved"}) {
        CAPTURE(name);
        const auto prog = tpipe::make_schedule(name).program(tpipe::topology{4}, tpipe::microbatches(8));
        auto ref = synth::make_uniform<true>(prog.stages());
        const auto want = synth::sequential(ref, prog.units);
        auto pipe = synth::make_gpu_uniform<true>(prog.stages(), d);
        const auto got = synth::run_collect(pipe, prog, eng);
        CHECK(got.outputs == want.outputs);
        CHECK(got.states == want.states);
    }
}

TEST_CASE("a kernel that fails on the device is the run's error naming rank, stage, action and unit", "[cuda][cpu][engine][failure]")
{
    struct where {
        int stage;
        synth::device_fault f;
        tpipe::op expected;
    };
    for (completion_mode mode : {completion_mode::event_poll, completion_mode::host_func}) {
        for (const where& w : {where{1, {2, 0, 'F', fake::code::illegal_address}, tpipe::op::F},
                               where{2, {1, 0, 'B', fake::code::illegal_address}, tpipe::op::B},
                               where{0, {3, 0, 'F', -1}, tpipe::op::F},      // the launch itself fails
                               where{3, {0, 0, 'B', -1}, tpipe::op::B}}) {
            CAPTURE(name_of(mode), w.stage, w.f.kind, w.f.code);
            fake::driver d(2);
            d.start_device();
            engine_t eng = make_engine(d, 4, mode);
            const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{4}, tpipe::microbatches(6));
            auto pipe = synth::make_gpu_uniform<true>(4, d, w.stage, w.f);
            tpipe::run_options opts;
            opts.watchdog = std::chrono::seconds(2);
            if (mode == completion_mode::host_func && w.f.code > 0) {
                opts.watchdog = std::chrono::milliseconds(300);
                // A failed stream runs no host function (CUDA says so), so only the watchdog ends
                // the wait: host_func mode cannot name a device error (event_poll does).
                CHECK_THROWS_AS(synth::run_collect(pipe, prog, eng, opts), tpipe::watchdog_error);
                continue;
            }
            try {
                synth::run_collect(pipe, prog, eng, opts);
                FAIL("run did not throw");
            } catch (const tpipe::execution_error& e) {
                CAPTURE(e.what());
                CHECK(e.stage() == w.stage);
                CHECK(e.rank() == prog.stage_rank[w.stage]);
                CHECK(e.failed_action().kind == w.expected);
                CHECK(e.failed_unit().microbatch == w.f.microbatch);
                CHECK(contains(e.what(), "rank " + std::to_string(e.rank())));
                CHECK(contains(e.what(), "stage " + std::to_string(w.stage)));
                CHECK(contains(e.what(), "device " + std::to_string(e.rank()) + " (GPU " + std::to_string(e.rank() / 2) + ") compute"));
                CHECK(contains(e.what(), w.f.code > 0 ? "cudaErrorIllegalAddress" : "cudaErrorInvalidConfiguration"));
                CHECK_THROWS_AS(std::rethrow_exception(e.cause()), tpipe::cuda::cuda_error);
            }
        }
    }
}

TEST_CASE("a GPU that never finishes is the watchdog's error naming who waits for what, not a hang", "[cuda][cpu][engine][watchdog]")
{
    for (completion_mode mode : {completion_mode::event_poll, completion_mode::host_func}) {
        CAPTURE(name_of(mode));
        fake::driver d(2);
        d.start_device();
        engine_t eng = make_engine(d, 2, mode);
        d.stall(eng.compute_stream(1));  // rank 1's GPU work never completes
        const auto prog = tpipe::make_schedule("gpipe").program(tpipe::topology{2}, tpipe::microbatches(2));
        auto pipe = synth::make_gpu_uniform<true>(2, d);
        tpipe::run_options opts;
        opts.watchdog = std::chrono::milliseconds(300);
        try {
            synth::run_collect(pipe, prog, eng, opts);
            FAIL("run did not throw");
        } catch (const tpipe::watchdog_error& e) {
            CAPTURE(e.what());
            CHECK(contains(e.what(), "rank 1 (device 1) is running at action #1 of stage 1 '1F0' (microbatch 0, slice 0, rows [0,1), tokens [0,1)): waits for the GPU: the work its "
                                     "stage function enqueued on the compute stream of device 1 (GPU 1) has not completed"));
            CHECK(contains(e.what(), "rank 0 (device 0) waits at action"));
        }
        CHECK(eng.waiting_for(1).empty());  // the cancelled compute is no longer waiting
        CHECK(!eng.cancelled());            // the cancellation ended with the iteration
        // The GPU recovers: the next iteration on the same engine is exact again.
        d.stall(eng.compute_stream(1), false);
        auto fresh = synth::make_gpu_uniform<true>(2, d);
        auto ref = synth::make_uniform<true>(2);
        const auto want = synth::sequential(ref, prog.units);
        const auto got = synth::run_collect(fresh, prog, eng);
        CHECK(got.outputs == want.outputs);
        CHECK(got.states == want.states);
    }
}

TEST_CASE("thousands of completions from the driver thread: each coroutine resumes once, on its loop", "[cuda][cpu][engine][stress]")
{
    for (completion_mode mode : {completion_mode::event_poll, completion_mode::host_func}) {
        CAPTURE(name_of(mode));
        fake::driver d(2);
        d.start_device();
        engine_t eng(d, {.gpu_of_device = {0, 1, 1}, .completion = mode});
        constexpr int per_device = 4, computes = 400;
        std::atomic<int> wrong_loop{0}, wrong_stream{0};
        std::vector<int> resumed(3 * per_device, 0);
        auto worker = [&](int dev, int k) -> tpipe::task<void> {
            co_await eng.loop_of(dev).schedule();
            for (int i = 0; i < computes; ++i) {
                const int v = co_await eng.compute(dev, [&] {
                    const auto& ctx = tpipe::cuda::basic_current_context<fake::driver>();
                    if (ctx.stream != eng.compute_stream(dev) || ctx.device != dev) ++wrong_stream;
                    d.launch(ctx.stream);
                    return i;
                });
                if (tpipe::loop::current() != &eng.loop_of(dev)) ++wrong_loop;
                if (v == i) ++resumed[static_cast<std::size_t>(dev * per_device + k)];
            }
        };
        std::vector<tpipe::task<void>> all;
        for (int dev = 0; dev < 3; ++dev)
            for (int k = 0; k < per_device; ++k) all.push_back(worker(dev, k));
        tpipe::sync_wait(tpipe::when_all(std::move(all)));
        for (int n : resumed) CHECK(n == computes);
        CHECK(wrong_loop.load() == 0);
        CHECK(wrong_stream.load() == 0);
        if (mode == completion_mode::host_func) CHECK(d.host_funcs_run() == 3u * per_device * computes);
        // Waits in flight at once: at most one event (and slot) each, reused ever after.
        CHECK(eng.events().created() <= 3u * per_device);
    }
}

TEST_CASE("current_stream() outside a compute function is refused; user streams are used as given", "[cuda][cpu][engine]")
{
    CHECK_THROWS_WITH(tpipe::cuda::basic_current_context<fake::driver>(), Catch::Contains("no stage compute function"));
    fake::driver d(2);
    d.set_immediate(true);
    fake::stream_state* mine = nullptr;
    d.set_device(1);
    d.stream_create(&mine);
    d.set_device(0);
    engine_t eng(d, {.gpu_of_device = {0, 1}, .compute_streams = {nullptr, mine}});
    CHECK(eng.compute_stream(1) == mine);
    CHECK(eng.compute_stream(0) != nullptr);
    auto body = [&]() -> tpipe::task<fake::stream_state*> {
        co_await eng.loop_of(1).schedule();
        co_return co_await eng.compute(1, [&] {
            d.launch(tpipe::cuda::basic_current_context<fake::driver>().stream);
            return tpipe::cuda::basic_current_context<fake::driver>().stream;
        });
    };
    CHECK(tpipe::sync_wait(body()) == mine);
    CHECK(d.queued(mine) == 0);
    // An exception from the stage function resumes the awaiter with it, without a wait.
    auto throws = [&]() -> tpipe::task<void> {
        co_await eng.loop_of(0).schedule();
        co_await eng.compute(0, []() -> int { throw std::runtime_error("stage failed"); });
    };
    CHECK_THROWS_WITH(tpipe::sync_wait(throws()), "stage failed");
}

TEST_CASE("the CUDA engine refuses placements and options that do not fit", "[cuda][cpu][engine]")
{
    fake::driver d(2);
    fake::stream_state* on_gpu1 = nullptr;
    d.set_device(1);
    d.stream_create(&on_gpu1);
    d.set_device(0);
    CHECK_THROWS_WITH(engine_t(d, {}), Catch::Contains("gpu_of_device is empty"));
    CHECK_THROWS_WITH(engine_t(d, {.gpu_of_device = {0, 2}}), Catch::Contains("GPUs [0, 2)"));
    CHECK_THROWS_WITH(engine_t(d, {.gpu_of_device = {0, -1}}), Catch::Contains("placed on GPU -1"));
    CHECK_THROWS_WITH(engine_t(d, {.gpu_of_device = {0, 1}, .threads = 3}), Catch::Contains("threads must be in [1, 2]"));
    CHECK_THROWS_WITH(engine_t(d, {.gpu_of_device = {0, 1}, .compute_streams = {on_gpu1}}),
                      Catch::Contains("compute_streams has 1 entries for 2 devices"));
    CHECK_THROWS_WITH(engine_t(d, {.gpu_of_device = {0, 1}, .compute_streams = {on_gpu1, nullptr}}),
                      Catch::Contains("is on GPU 1 but the device is placed on GPU 0"));
    engine_t ok(d, {.gpu_of_device = {1}});
    CHECK_THROWS_AS(ok.loop_of(1), tpipe::invalid_argument);
    CHECK_THROWS_AS(ok.transfer_stream(-1), tpipe::invalid_argument);
}
