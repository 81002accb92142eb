// tpipe::mpi::job under mpiexec -np 2, 3, 4, for every (t, K, d) with t * K * d processes: each
// group's communicator holds exactly the processes the layout names, and the transport connects
// tensor rank k of stage r to tensor rank k of stage r + 1 of the same replica.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "mpi_suite.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/exec/pipeline.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/mpi/job.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

using tpipe::axes;
using tpipe::coordinate;
using tpipe::group_kind;

namespace {

int world_size()
{
    int n = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    return n;
}

//! Every (t, K, d) whose product is n.
std::vector<axes> shapes_of(int n)
{
    std::vector<axes> out;
    for (int t = 1; t <= n; ++t)
        for (int K = 1; t * K <= n; ++K)
            if (n % (t * K) == 0) out.push_back({.tensor_ranks = t, .pipeline_ranks = K, .replicas = n / (t * K)});
    return out;
}

std::int64_t sum(tpipe::mpi::communicator& c, std::int64_t v)
{
    tpipe::sync_wait([](tpipe::mpi::communicator& c, std::int64_t& v) -> tpipe::task<void> {
        co_await c.all_reduce_sum(std::span<std::int64_t>(&v, 1));
    }(c, v));
    return v;
}

using vec = std::vector<long long>;

//! Appends its tag (100 * tensor rank + stage) to the activation going forward and to the gradient
//! going back, so what reaches the ends names every stage it crossed and whose tensor rank ran it.
struct tagging_stage {
    using input = vec;
    using output = vec;
    long long tag = 0;
    vec forward(const tpipe::unit&, vec x)
    {
        x.push_back(tag);
        return x;
    }
    vec backward(const tpipe::unit&, vec g)
    {
        g.push_back(tag);
        return g;
    }
};

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

TEST_CASE("mpi::job: every group's communicator holds exactly the processes the layout names", "[mpi][layout]")
{
    const int n = world_size();
    for (const axes& a : shapes_of(n)) {
        CAPTURE(a.text());
        tpipe::mpi::job job(a);
        const tpipe::layout& l = job.layout();
        const coordinate me = job.where();
        REQUIRE(l.sizes() == a);
        REQUIRE(tpipe_test::every_process(me == l.at(job.process()) && l.process_of(me) == job.process() && !job.single_process()));
        // 1 << process, summed over a group, is a bit for each of its processes: the closed form
        // is the bits of the processes the layout lists for that group.
        const std::int64_t mine = std::int64_t{1} << job.process();
        struct check {
            tpipe::mpi::communicator* c;
            group_kind kind;
        } checks[] = {{&job.tensor(), group_kind::tensor}, {&job.data(), group_kind::data}, {&job.pipeline(), group_kind::pipeline}};
        for (const auto& [c, kind] : checks) {
            std::int64_t want = 0;
            for (int p : l.processes_of(l.group(kind, me))) want |= std::int64_t{1} << p;
            CAPTURE(static_cast<int>(kind));
            REQUIRE(tpipe_test::every_process(sum(*c, mine) == want && c->size() == l.group_size(kind) &&
                                              c->rank() == l.position(kind, me)));
        }
        REQUIRE(tpipe_test::every_process(sum(job.all(), mine) == (std::int64_t{1} << n) - 1));
    }
}

TEST_CASE("mpi::job: the transport connects tensor rank k of stage r to tensor rank k of stage r + 1", "[mpi][layout][run]")
{
    const int n = world_size();
    for (const axes& a : shapes_of(n)) {
        CAPTURE(a.text());
        tpipe::mpi::job job(a);
        const coordinate me = job.where();
        const int K = a.pipeline_ranks;
        auto& x = job.transport();
        bool placed = x.replica() == me.replica && x.tensor_rank() == me.tensor_rank;
        for (int r = 0; r < K; ++r)
            placed = placed && x.runs(r) == (r == me.rank) &&
                     x.where(r) == (r == me.rank ? "" : "on process " + std::to_string(job.layout().process_of(me.replica, r, me.tensor_rank)));
        REQUIRE(tpipe_test::every_process(placed));

        std::vector<tagging_stage> stages;
        for (int s = 0; s < K; ++s) stages.push_back({100LL * me.tensor_rank + s});
        tpipe::uniform_pipeline<tagging_stage> pipe(std::move(stages));
        const auto prog = tpipe::make_schedule("1f1b").program(tpipe::topology{K}, tpipe::microbatches(2 * K));
        // Each unit starts as the (replica, tensor rank, microbatch) of the process that feeds it.
        auto origin = [&](const tpipe::unit& u) { return 1000LL * me.tensor_rank + 10LL * me.replica + u.microbatch; };
        std::vector<vec> outputs(static_cast<std::size_t>(prog.units.units())), input_grads(outputs.size());
        tpipe::io_for<decltype(pipe)> io;
        io.source = [&](const tpipe::unit& u) { return vec{origin(u)}; };
        io.output_grad = [&](const tpipe::unit& u, vec&& y) {
            outputs[static_cast<std::size_t>(u.microbatch)] = y;
            return vec{-origin(u)};
        };
        io.input_grad = [&](const tpipe::unit& u, vec&& dx) { input_grads[static_cast<std::size_t>(u.microbatch)] = std::move(dx); };
        tpipe::cpu_engine engine(1);
        tpipe::run_options opts;
        opts.watchdog = std::chrono::seconds(30);
        tpipe::runner runner(pipe, prog, engine, x, opts);
        runner.run(io);

        bool ok = true;
        for (int m = 0; m < prog.units.units(); ++m) {
            const tpipe::unit u = prog.units.at(m, 0);
            vec forward{origin(u)}, backward{-origin(u)};
            for (int s = 0; s < K; ++s) forward.push_back(100LL * me.tensor_rank + s);
            for (int s = K - 1; s >= 0; --s) backward.push_back(100LL * me.tensor_rank + s);
            if (me.rank == K - 1) ok = ok && outputs[static_cast<std::size_t>(m)] == forward;
            if (me.rank == 0) ok = ok && input_grads[static_cast<std::size_t>(m)] == backward;
        }
        REQUIRE(tpipe_test::every_process(ok));
    }
}

TEST_CASE("mpi::job: a launch of another size is refused on every process, naming the sizes and the -np", "[mpi][layout][failure]")
{
    const int n = world_size();
    const axes a{.tensor_ranks = 1, .pipeline_ranks = n + 1, .replicas = 1};
    const std::string got = message_of([&] { tpipe::mpi::job job(a); });
    CAPTURE(got);
    REQUIRE(tpipe_test::every_process(got == "mpi::job: the job has " + std::to_string(n) + " processes, but 1 tensor rank x " +
                                                 std::to_string(n + 1) +
                                                 " pipeline ranks x 1 replica need " + std::to_string(n + 1) +
                                                 " (one each) or 1 (every rank on threads); launch it with mpirun -np " +
                                                 std::to_string(n + 1)));
}

TEST_CASE("mpi::job as one process runs every coordinate on threads: a transport per pipeline, no process groups", "[mpi][layout]")
{
    tpipe::mpi::job job(axes{.tensor_ranks = 2, .pipeline_ranks = 2, .replicas = 1}, MPI_COMM_SELF);
    REQUIRE(job.single_process());
    REQUIRE(job.layout().processes() == 1);
    for (int k = 0; k < 2; ++k) {
        auto& x = job.transport({.replica = 0, .tensor_rank = k});
        REQUIRE(x.tensor_rank() == k);
        REQUIRE((x.runs(0) && x.runs(1)));
    }
    CHECK(message_of([&] { (void)job.transport(); }) ==
          "mpi::job::transport(): this process runs 2 pipelines (2 tensor ranks x 2 pipeline ranks x 1 replica on its threads); "
          "name one with transport({.replica = d, .tensor_rank = k})");
    CHECK(message_of([&] { (void)job.tensor(); }) ==
          "mpi::job::tensor(): this one process runs every group of 2 tensor ranks x 2 pipeline ranks x 1 replica on its threads; "
          "give each thread its groups with tpipe::split_groups over a tpipe::thread_group, or launch it with mpirun -np 4");
    CHECK(message_of([&] { (void)job.transport({.replica = 1, .tensor_rank = 0}); }) ==
          "mpi::job::transport: the pipeline of replica 1 and tensor rank 0 has no rank on process 0 of the layout 2 tensor ranks "
          "x 2 pipeline ranks x 1 replica");
}
