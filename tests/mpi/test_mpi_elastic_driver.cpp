// tpipe::mpi::elastic_driver (one process per device; mpiexec -np 2, 3, 4) trains the test's own
// chain model (tests/elastic/chain_model.hpp) with the plans and the bits of the thread driver's
// run of the same options in this process: freezing, a shorter pipeline, replicas on the freed
// processes (or, without AutoDP, idle ones), the shared cache.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "../elastic/chain_model.hpp"
#include "mpi_suite.hpp"
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
