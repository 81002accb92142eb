#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "affine.hpp"
#include "fake_transport.hpp"
#include "members.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

using tpipe::nccl::fake::on_threads;
using dvec = std::vector<double>;

namespace {

//! Two processes with one boundary's channels each way set up by hand: process 0 sends
//! `keys` channels to process 1.
struct pair_of_processes {
    tpipe::nccl::fake::world w;
    tpipe::nccl::fake::notice_board board{2};
    tpipe::nccl::fake::host_pool pool;
    std::vector<tpipe::nccl::fake::comm_obj*> comms = w.init_all(2);
    tpipe::layout layout = tpipe::layout::one_rank_per_process(2);
};

bool no_errors(const std::vector<std::string>& e)
{
    bool ok = true;
    for (const auto& s : e)
        if (!s.empty()) {
            UNSCOPED_INFO(s);
            ok = false;
        }
    return ok;
}

} // namespace

TEST_CASE("nccl channels: many tags of different sizes on two channels of one pair arrive whatever order each side uses",
          "[nccl][transport][order]")
{
    const int tags = 12;
    // Boundary 0 forward and boundary 1 forward both go from process 0 to process 1 (as in an
    // interleaved schedule). The sender interleaves them one way, the receiver waits in another.
    for (bool sends_first : {true, false}) {
        CAPTURE(sends_first);
        pair_of_processes p;
        std::vector<std::vector<dvec>> got(2, std::vector<dvec>(tags));
        auto payload = [](int channel, int tag) {
            dvec v(static_cast<std::size_t>((tag * 7 + channel) % 5));  // 0..4 elements: some bodies are empty
            for (std::size_t i = 0; i < v.size(); ++i) v[i] = channel * 1000 + tag * 10 + double(i);
            return v;
        };
        std::atomic<bool> receiver_waiting{false};
        auto errors = on_threads(2, [&](int me) {
            tpipe::nccl::fake::control ctl(p.layout, me, p.board);
            tpipe::nccl::fake::transport x(tpipe::nccl::fake::api{&p.w}, p.comms[me], ctl, p.pool);
            std::vector<std::unique_ptr<tpipe::nccl::fake::transport::channel_type<dvec>>> ch;
            for (int b = 0; b < 2; ++b)
                ch.push_back(x.connect<dvec>(tpipe::endpoint{b, true, 0, 1, me == 0, tags}));
            tpipe::sync_wait([&]() -> tpipe::task<void> {
                if (me == 0) {
                    if (!sends_first)
                        while (!receiver_waiting) std::this_thread::yield();
                    for (int t = 0; t < tags; ++t)  // channel 1 ahead of channel 0 by two tags
                        for (int c : {1, 0}) {
                            const int tag = c == 1 ? t : t - 2;
                            if (tag >= 0) ch[c]->send(tag, payload(c, tag));
                        }
                    for (int tag = tags - 2; tag < tags; ++tag) ch[0]->send(tag, payload(0, tag));
                    for (auto& c : ch) co_await c->drain();
                } else {
                    for (auto& c : ch)
                        for (int t = 0; t < tags; ++t) c->post(t);
                    receiver_waiting = true;
                    for (int t = tags - 1; t >= 0; --t)  // backwards, channel 0 first
                        for (int c : {0, 1}) {
                            co_await ch[c]->arrival(t);
                            got[c][t] = ch[c]->take(t);
                        }
                }
            }());
        });
        REQUIRE(no_errors(errors));
        for (int c = 0; c < 2; ++c)
            for (int t = 0; t < tags; ++t) CHECK(got[c][t] == payload(c, t));
        CHECK(p.pool.made == 2 * tags);
    }
}

TEST_CASE("nccl channels: a payload for a channel the receiver does not have is refused, naming it", "[nccl][transport]")
{
    pair_of_processes p;
    p.w.stall_timeout = std::chrono::milliseconds(200);
    auto errors = on_threads(2, [&](int me) {
        tpipe::nccl::fake::control ctl(p.layout, me, p.board);
        tpipe::nccl::fake::transport x(tpipe::nccl::fake::api{&p.w}, p.comms[me], ctl, p.pool);
        // The sender thinks it feeds boundary 1, the receiver waits on boundary 0.
        auto ch = x.connect<dvec>(tpipe::endpoint{me == 0 ? 1 : 0, true, 0, 1, me == 0, 1});
        tpipe::sync_wait([&]() -> tpipe::task<void> {
            if (me == 0) {
                ch->send(0, dvec(3));
                co_await ch->drain();
            } else {
                co_await ch->arrival(0);
            }
        }());
    });
    CHECK_THAT(errors[1], Catch::Contains("a payload for boundary 1 (activations), tag 0, arrived, but this process has no such receiving channel"));
    CHECK_THAT(errors[0], Catch::Contains("deadlock"));  // its body is never received
}

namespace {

using nccl_test::affine;
using nccl_test::affine_stages;

tpipe::run_options with_watchdog()
{
    tpipe::run_options o;
    o.watchdog = std::chrono::seconds(20);
    return o;
}

struct recorded {
    std::map<int, dvec> outputs, input_grads;
};

tpipe::io_for<tpipe::uniform_pipeline<std::reference_wrapper<affine>>> io_into(recorded& r, std::mutex& m)
{
    tpipe::io_for<tpipe::uniform_pipeline<std::reference_wrapper<affine>>> io;
    io.source = [](const tpipe::unit& u) { return nccl_test::sample(0, u.microbatch); };
    io.output_grad = [&](const tpipe::unit& u, dvec&& y) {
        std::lock_guard<std::mutex> g(m);
        r.outputs[u.microbatch] = y;
        return nccl_test::loss_grad(std::move(y));
    };
    io.input_grad = [&](const tpipe::unit& u, dvec&& dx) {
        std::lock_guard<std::mutex> g(m);
        r.input_grads[u.microbatch] = std::move(dx);
    };
    return io;
}

//! What the one-process run of `prog` on `ranks` threads over `stages` (whose gradients
//! accumulate there) records: the run every pipeline over processes must equal.
recorded one_process_run(const tpipe::program& prog, int ranks, std::vector<affine>& stages)
{
    std::mutex m;
    recorded r;
    tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(std::vector<std::reference_wrapper<affine>>(stages.begin(), stages.end()));
    tpipe::cpu_engine eng(ranks);
    tpipe::run(pipe, prog, eng, io_into(r, m));
    return r;
}

} // namespace

TEST_CASE("nccl transport: a pipeline over processes (threads here) equals the one-process run, for every schedule",
          "[nccl][transport]")
{
    const int M = 6;
    for (int P : {2, 3}) {
        for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"}) {
            CAPTURE(P, name);
            const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
            const int stages = prog.stages();
            std::mutex m;
            auto ref = affine_stages(stages);
            const recorded ref_io = one_process_run(prog, P, ref);
            tpipe::nccl::fake::world w;
            tpipe::nccl::fake::notice_board board(P);
            tpipe::nccl::fake::host_pool pool;
            auto comms = w.init_all(P);
            const auto layout = tpipe::layout::one_rank_per_process(P);
            auto stages_of = std::vector<std::vector<affine>>(static_cast<std::size_t>(P), affine_stages(stages));
            recorded got;
            auto errors = on_threads(P, [&](int me) {
                tpipe::nccl::fake::control ctl(layout, me, board);
                tpipe::nccl::fake::transport x(tpipe::nccl::fake::api{&w}, comms[me], ctl, pool);
                tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
                    std::vector<std::reference_wrapper<affine>>(stages_of[me].begin(), stages_of[me].end()));
                tpipe::cpu_engine eng(P);
                tpipe::runner r(pipe, prog, eng, x, with_watchdog());
                r.run(io_into(got, m));
                r.run(io_into(got, m));  // a second iteration over the same channels
            });
            REQUIRE(no_errors(errors));
            CHECK(got.outputs == ref_io.outputs);
            CHECK(got.input_grads == ref_io.input_grads);
            for (int s = 0; s < stages; ++s) {
                const int owner = prog.stage_rank[s];
                CHECK(stages_of[owner][s].grad == std::vector<double>{2 * ref[s].grad[0], 2 * ref[s].grad[1]});
            }
        }
    }
}

TEST_CASE("nccl transport: a stage that fails on one process stops the others with the failure, not a hang",
          "[nccl][transport]")
{
    const int P = 3;
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(6));
    tpipe::nccl::fake::world w;
    tpipe::nccl::fake::notice_board board(P);
    tpipe::nccl::fake::host_pool pool;
    auto comms = w.init_all(P);
    const auto layout = tpipe::layout::one_rank_per_process(P);
    std::mutex m;
    recorded got;
    const auto start = std::chrono::steady_clock::now();
    auto errors = on_threads(P, [&](int me) {
        tpipe::nccl::fake::control ctl(layout, me, board);
        tpipe::nccl::fake::transport x(tpipe::nccl::fake::api{&w}, comms[me], ctl, pool);
        auto stages = affine_stages(P);
        if (me == 1) stages[1].fail_at_microbatch = 2;
        tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(std::vector<std::reference_wrapper<affine>>(stages.begin(), stages.end()));
        tpipe::cpu_engine eng(P);
        tpipe::runner r(pipe, prog, eng, x, with_watchdog());
        r.run(io_into(got, m));
    });
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
    CHECK_THAT(errors[1], Catch::Contains("injected fault in B"));
    for (int p : {0, 2}) CHECK_THAT(errors[p], Catch::Contains("the iteration failed on process 1"));
}

namespace {
struct other_pool {};
//! A device payload made from a pool the transport was not given.
struct foreign_payload {
    std::vector<double> v;
};
} // namespace

template <>
struct tpipe::device_payload_traits<foreign_payload> {
    struct header {
        std::uint64_t count;
    };
    using pool = other_pool;
    static header header_of(const foreign_payload& p) { return {p.v.size()}; }
    static foreign_payload make(const header& h, other_pool&) { return {std::vector<double>(static_cast<std::size_t>(h.count))}; }
    static std::span<const std::byte> device_bytes(const foreign_payload& p) { return std::as_bytes(std::span<const double>(p.v)); }
    static std::span<std::byte> device_bytes(foreign_payload& p) { return std::as_writable_bytes(std::span<double>(p.v)); }
};

TEST_CASE("nccl transport: the runner over NCCL is the runner of threads and MPI, and a payload without the right device form is "
          "refused when its channel is made",
          "[nccl][transport]")
{
    using pipe_t = tpipe::uniform_pipeline<std::reference_wrapper<affine>>;
    static_assert(std::same_as<decltype(tpipe::runner(std::declval<pipe_t&>(), std::declval<const tpipe::program&>(),
                                                      std::declval<tpipe::cpu_engine&>(), std::declval<tpipe::nccl::fake::transport&>())),
                               tpipe::runner<pipe_t, tpipe::cpu_engine>>);
    static_assert(std::same_as<decltype(tpipe::runner(std::declval<pipe_t&>(), std::declval<const tpipe::program&>(),
                                                      std::declval<tpipe::cpu_engine&>())),
                               tpipe::runner<pipe_t, tpipe::cpu_engine>>);

    pair_of_processes p;
    auto errors = on_threads(2, [&](int me) {  // making the transport is collective
        tpipe::nccl::fake::control ctl(p.layout, me, p.board);
        tpipe::nccl::fake::transport x(tpipe::nccl::fake::api{&p.w}, p.comms[me], ctl, p.pool);
        if (me != 0) return;
        const tpipe::endpoint e{0, true, 0, 1, true, 2};
        // A host byte form only: NCCL moves device memory.
        CHECK_THROWS_WITH(x.connect<std::vector<float>>(e),
                          Catch::Contains("linked_channel (NCCL, process 1): this link moves bodies in device memory, and the payload "
                                          "type has no device form; specialise tpipe::device_payload_traits<T>"));
        // A device form made from another pool than the transport's.
        CHECK_THROWS_WITH(x.connect<foreign_payload>(e),
                          Catch::Contains("make it from a pool of type (anonymous namespace)::other_pool, but the transport was "
                                          "given a pool of type tpipe::nccl::fake::host_pool"));
        CHECK_NOTHROW(x.connect<dvec>(e));  // the right one
    });
    CHECK(no_errors(errors));
}

TEST_CASE("nccl transport: made from a unique id under a control plane's set-up bound, NCCL's init and split run there, on "
          "the caller's GPU, and the pipeline equals the one-process run",
          "[nccl][transport]")
{
    const int P = 2, M = 4;
    const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{P}, tpipe::microbatches(M));
    std::mutex m;
    auto ref = affine_stages(P);
    const recorded ref_io = one_process_run(prog, P, ref);
    tpipe::nccl::fake::world w(P);  // a GPU per process
    tpipe::nccl::fake::notice_board board(P);
    tpipe::nccl::fake::host_pool pool;
    const auto layout = tpipe::layout::one_rank_per_process(P);
    tpipe::nccl::unique_id id;
    REQUIRE(tpipe::nccl::fake::api{&w}.get_unique_id(id) == 0);
    auto stages_of = std::vector<std::vector<affine>>(static_cast<std::size_t>(P), affine_stages(P));
    std::vector<std::vector<std::string>> steps(P);
    std::vector<std::pair<int, int>> gpus(P);
    recorded got;
    auto errors = on_threads(P, [&](int me) {
        if (w.device().set_device(me) != 0) throw std::runtime_error("no fake GPU " + std::to_string(me));
        tpipe::nccl::fake::bounding_control ctl(layout, me, board);
        tpipe::nccl::basic_transport<tpipe::nccl::fake::api, tpipe::nccl::fake::bounding_control, tpipe::nccl::fake::host_pool> x(
            tpipe::nccl::fake::api{&w}, id, ctl, pool);
        steps[me] = ctl.calls;
        gpus[me] = {x.up_comm()->gpu, x.down_comm()->gpu};
        tpipe::uniform_pipeline<std::reference_wrapper<affine>> pipe(
            std::vector<std::reference_wrapper<affine>>(stages_of[me].begin(), stages_of[me].end()));
        tpipe::cpu_engine eng(P);
        tpipe::runner r(pipe, prog, eng, x, with_watchdog());
        r.run(io_into(got, m));
    });
    REQUIRE(no_errors(errors));
    for (int me = 0; me < P; ++me) {
        CAPTURE(me);
        CHECK(steps[me] == std::vector<std::string>{"tpipe::nccl::transport: ncclCommInitRank",
                                                    "tpipe::nccl::transport: ncclCommSplit (the second communicator)"});
        CHECK(gpus[me] == std::pair{me, me});  // made on the bounding threads, bound to the caller's GPU
    }
    CHECK(got.outputs == ref_io.outputs);
    CHECK(got.input_grads == ref_io.input_grads);
}
