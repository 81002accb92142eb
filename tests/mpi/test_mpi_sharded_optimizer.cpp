// tpipe::sharded_optimizer over MPI processes (mpiexec -np 2, 3, 4): equals the replicated
// AdamW bitwise, and equals the same run on threads in this process bitwise.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "../comm/sharded_reference.hpp"
#include "mpi_suite.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/mpi/communicator.hpp"

using tpipe_test::bitwise_equal;

TEST_CASE("mpi sharded_optimizer equals the replicated optimizer and the threads' run bitwise", "[mpi][sharded]")
{
    auto world = tpipe::mpi::communicator::world();
    const int d = world.size();
    for (std::size_t n : {std::size_t{2}, std::size_t{5001}}) {
        CAPTURE(n);
        world.set_chunk_bytes(1024);  // several pieces per segment
        std::vector<float> rep, sh;
        std::size_t state = 0;
        tpipe::sync_wait(tpipe_test::replicated_and_sharded(world, n, 4, rep, sh, state));
        REQUIRE(tpipe_test::every_process(bitwise_equal(sh, rep) && state == 2 * tpipe::ring_segment(n, d, world.rank()).size));

        tpipe::thread_group g(d);
        std::vector<std::vector<float>> trep(static_cast<std::size_t>(d)), tsh(static_cast<std::size_t>(d));
        std::vector<std::size_t> tstate(static_cast<std::size_t>(d));
        std::vector<std::thread> threads;
        for (int i = 0; i < d; ++i)
            threads.emplace_back([&, i] {
                auto c = g.member(i);
                const auto u = static_cast<std::size_t>(i);
                tpipe::sync_wait(tpipe_test::replicated_and_sharded(c, n, 4, trep[u], tsh[u], tstate[u]));
            });
        for (auto& t : threads) t.join();
        REQUIRE(tpipe_test::every_process(bitwise_equal(sh, tsh[static_cast<std::size_t>(world.rank())])));
    }
}
