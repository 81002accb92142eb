// tpipe::linked_channel over an MPI link with a recyclable payload (std::vector): once a send completed, its body
// serves the next receive of that size on the same process (tpipe/transport/payload_pool.hpp).
#include <catch2/catch.hpp>

#include <cstddef>
#include <memory>
#include <vector>

#include "mpi_suite.hpp"
#include "tpipe/transport/payload_pool.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/mpi/link.hpp"
#include "tpipe/transport/linked_channel.hpp"

TEST_CASE("a channel over MPI receives into the body of a completed send (payload pool)", "[mpi][pool]")
{
    using bytes = std::vector<std::byte>;
    int me = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    auto& pool = tpipe::payload_pool<bytes>::global();
    pool.clear();
    constexpr std::size_t size = std::size_t{1} << 20;
    bool ok = true;
    if (me < 2) {  // ranks 0 and 1 ping-pong; the others only agree on the outcome
        const int peer = 1 - me;
        tpipe::linked_channel<bytes> out(std::make_unique<tpipe::mpi::link>(comm, peer, me == 0 ? 0 : 8, 3), tpipe::channel_end::sender, 3),
            in(std::make_unique<tpipe::mpi::link>(comm, peer, me == 0 ? 8 : 0, 3), tpipe::channel_end::receiver, 3);
        tpipe::sync_wait([&]() -> tpipe::task<void> {
            const std::byte* last_sent = nullptr;
            for (int round = 0; round < 3; ++round) {
                if (me == 0) {  // ping: send, wait until sent, then receive the echo
                    bytes mine(size, std::byte(round));
                    const std::byte* sent = mine.data();
                    out.send(round, std::move(mine));
                    co_await out.drain();  // the send completed: its body is in the pool
                    in.post(round);
                    co_await in.arrival(round);
                    bytes got = in.take(round);
                    ok = ok && got.size() == size && got.front() == std::byte(round) && got.back() == std::byte(round);
                    ok = ok && got.data() == sent;  // received into the recycled body
                } else {  // echo: receive, send it back
                    in.post(round);
                    co_await in.arrival(round);
                    bytes got = in.take(round);
                    ok = ok && got.size() == size && got.front() == std::byte(round) && got.back() == std::byte(round);
                    if (round > 0) ok = ok && got.data() == last_sent;  // the body it echoed last round
                    last_sent = got.data();
                    out.send(round, std::move(got));
                    co_await out.drain();
                }
            }
        }());
    }
    MPI_Comm_free(&comm);
    CAPTURE(pool.hits(), pool.misses());
    REQUIRE(tpipe_test::every_process(ok));
    pool.clear();
}
