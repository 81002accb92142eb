// tpipe::mpi::elastic_driver (one process per device; mpiexec -np 2, 3, 4) trains the test's own
// chain model (tests/elastic/chain_model.hpp) with the plans and the bits of the thread driver's
// run of the same options in this process: freezing, a shorter pipeline, replicas on the freed
// processes (or, without AutoDP, idle ones), the shared cache. Plans agree: share_plan_inputs, and
// the driver's refusal when they would not.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "../elastic/chain_model.hpp"
#include "mpi_suite.hpp"
#include "tpipe/comm/every_member.hpp"
#include "tpipe/elastic/thread_driver.hpp"
#include "tpipe/mpi/elastic_driver.hpp"

TEST_CASE("mpi elastic_driver trains a user model with the thread driver's plans and bits", "[mpi][elastic]")
{
    using tpipe_test::chain;
    const int processes = tpipe::mpi::communicator::world().size();
    std::vector<double> data(48);  // 4 steps of 12 an epoch: 12 samples split over 1 to 4 replicas
    for (std::size_t k = 0; k < data.size(); ++k) data[k] = 0.5 + 0.03 * static_cast<double>(k % 11);
    const int units = 5;
    for (const bool autodp : {true, false}) {
        CAPTURE(processes, autodp);
        tpipe::elastic::driver_options o;
        o.devices = processes;
        o.batch = 12;
        o.steps = 16;
        o.freeze_every = 4;
        o.threads = 1;
        o.autodp = autodp;
        o.measured = {std::vector<double>(units, 1.0), std::vector<double>(units, 2.0)};
        o.freeze = [](int interval, int) { return interval == 0 ? 0 : interval == 1 ? 2 : 3; };
        tpipe::elastic::thread_driver<chain> threads([&] { return std::make_unique<chain>(units, data); },
                                                     static_cast<std::int64_t>(data.size()), o);
        const auto want = threads.run();
        tpipe::mpi::elastic_driver<chain> procs(std::make_unique<chain>(units, data), static_cast<std::int64_t>(data.size()),
                                                o, 1);
        const auto got = procs.run();
        bool same = got.intervals.size() == want.intervals.size() && got.replicas_identical && got.replans_kept_weights;
        for (std::size_t i = 0; same && i < got.intervals.size(); ++i) {
            const auto &a = got.intervals[i], &b = want.intervals[i];
            same = a.plan.stages == b.plan.stages && a.plan.replicas == b.plan.replicas && a.plan.frozen == b.plan.frozen &&
                   a.mean_loss == b.mean_loss && a.rows_cached == b.rows_cached && a.rows_computed == b.rows_computed;
        }
        CHECK(procs.model().w == threads.replica(0).w);  // bitwise: == on doubles
        CHECK(tpipe_test::every_process(same && procs.model().w == threads.replica(0).w));
        if (processes > 1 && autodp) CHECK(got.intervals.back().plan.replicas > 1);  // the freed devices became replicas
    }
}

TEST_CASE("share_plan_inputs gives every process process 0's unit times and token tables; the driver refuses "
          "processes that would plan apart",
          "[mpi][elastic]")
{
    using tpipe_test::chain;
    auto world = tpipe::mpi::communicator::world();
    const int me = world.rank(), processes = world.size();
    std::vector<double> data(48, 0.7);
    const int units = 5;
    tpipe::elastic::driver_options o;
    o.devices = processes;
    o.batch = 12;
    o.steps = 4;
    o.threads = 1;
    // Each process "measures" its own times and tables (as real measurements differ).
    auto measured_here = [&] {
        tpipe::elastic::driver_options m = o;
        const double t = 1.0 + me;
        m.measured = {std::vector<double>(units, t), std::vector<double>(units, 2 * t)};
        m.measured.update = std::vector<double>(units, 0.1 * t);
        m.measured.forward_fixed = std::vector<double>(units, 0.01 * t);
        m.measured.backward_fixed = std::vector<double>(units, 0.02 * t);
        tpipe::elastic::token_slicing s;
        s.granularity = 4;
        for (int u = 0; u < units; ++u) {
            std::vector<tpipe::latency_sample> table;  // b x s x c: what a profile measures
            for (std::int64_t b : {1, 2})
                for (std::int64_t n : {4, 8})
                    for (std::int64_t c : {0, 4, 8})
                        table.push_back({.b = b, .s = n, .c = c, .seconds = t * (u + 1) * double(b * n + b * c + b * n * c)});
            s.units.emplace_back(std::move(table));
        }
        m.slicing = std::move(s);
        return m;
    };
    const auto own = measured_here();
    const std::vector<double> costs(units, 1.0);
    const auto digests = [&](const tpipe::elastic::driver_options& x) {
        return tpipe::sync_wait(tpipe::every_member(world, static_cast<std::int64_t>(tpipe::mpi::plan_inputs_digest(costs, units - 1, x))));
    };
    if (processes > 1) {
        const auto apart = digests(own);
        CHECK(apart[1] != apart[0]);
        // Fixed microbatch times shape the plans: they alone set the digests apart.
        auto same_but_fixed = own;
        same_but_fixed.measured.forward.assign(units, 1.0);
        same_but_fixed.measured.backward.assign(units, 2.0);
        same_but_fixed.slicing.reset();
        const auto fixed_apart = digests(same_but_fixed);
        CHECK(fixed_apart[1] != fixed_apart[0]);
        // The driver says who differs, on every process (no hang).
        CHECK_THROWS_WITH(tpipe::mpi::elastic_driver<chain>(std::make_unique<chain>(units, data), 48, own, 1),
                          Catch::Contains("process 1 plans from other unit costs, options, unit times or token latency tables than process 0"));
    }
    auto shared = me == 0 ? own : o;  // only process 0 measured
    tpipe::mpi::share_plan_inputs(world, shared, units);
    const auto together = digests(shared);
    for (auto d : together) CHECK(d == together.front());
    CHECK(shared.measured.forward == std::vector<double>(units, 1.0));
    CHECK(shared.measured.update == std::vector<double>(units, 0.1));  // process 0's optional times too
    CHECK(shared.measured.reduce.empty());
    CHECK(shared.measured.forward_fixed == std::vector<double>(units, 0.01));
    CHECK(shared.measured.backward_fixed == std::vector<double>(units, 0.02));
    REQUIRE(shared.slicing);
    CHECK(shared.slicing->granularity == 4);
    CHECK(shared.slicing->units.at(2).samples().at(1).seconds == 3.0 * (4 + 4 + 16));  // process 0's: t = 1, unit 2, (1, 4, 4)
    CHECK_NOTHROW(tpipe::mpi::elastic_driver<chain>(std::make_unique<chain>(units, data), 48, shared, 1));
}
