#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "../cuda/fake_driver.hpp"
#include "affine.hpp"
#include "fake_transport.hpp"
#include "members.hpp"
#include "tpipe/cuda/basic_peer_transport.hpp"
#include "tpipe/cuda/driver_copier.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/transport/composed_transport.hpp"
#include "tpipe/exec/detail/boundary.hpp"
#include "tpipe/exec/run.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

using dvec = std::vector<double>;

namespace {

using copier = tpipe::cuda::driver_copier<::fake::driver>;
using peer_transport = tpipe::cuda::basic_peer_transport<copier, tpipe::nccl::fake::host_pool>;

//! One process's GPUs on a fake world's driver (the CUDA engine's test double, whose device
//! thread runs the peer copies and the fake NCCL's kernels alike: the bytes of a copy land when it
//! completes, so a receiver that read before the copy's marker did would see the zeros of the
//! payload its pool made), with one transfer stream per GPU.
struct gpus {
    tpipe::nccl::fake::world& w;
    std::vector<::fake::driver::stream_type> stream;

    gpus(tpipe::nccl::fake::world& on, int n) : w(on)
    {
        ::fake::driver& d = w.device();
        for (int g = 0; g < n; ++g) {
            d.set_device(g);
            stream.emplace_back();
            d.stream_create(&stream.back());
        }
        d.set_device(0);
    }

    copier copy() { return copier(w.device(), w.events()); }
    //! The transfer stream of each rank's GPU.
    std::vector<::fake::driver::stream_type> streams_of(const std::vector<int>& gpu_of_rank) const
    {
        std::vector<::fake::driver::stream_type> v;
        for (int g : gpu_of_rank) v.push_back(stream[static_cast<std::size_t>(g)]);
        return v;
    }
};

using nccl_test::affine;

tpipe::io_for<tpipe::uniform_pipeline<affine>> io_into(std::map<int, dvec>& out, std::map<int, dvec>& dx, std::mutex& m)
{
    tpipe::io_for<tpipe::uniform_pipeline<affine>> io;
    io.source = [](const tpipe::unit& u) { return nccl_test::sample(0, u.microbatch); };
    io.output_grad = [&](const tpipe::unit& u, dvec&& y) {
        std::lock_guard<std::mutex> g(m);
        out[u.microbatch] = y;
        return nccl_test::loss_grad(std::move(y));
    };
    io.input_grad = [&](const tpipe::unit& u, dvec&& d) {
        std::lock_guard<std::mutex> g(m);
        dx[u.microbatch] = std::move(d);
    };
    return io;
}

tpipe::uniform_pipeline<affine> make_pipe(int n) { return tpipe::uniform_pipeline<affine>(nccl_test::affine_stages(n)); }

//! How many of the first m samples carry data (an empty payload is never copied).
int nonempty_samples(int m)
{
    int n = 0;
    for (int u = 0; u < m; ++u) n += !nccl_test::sample(0, u).empty();
    return n;
}

//! The reference: `prog` in this process with local channels.
void run_locally(const tpipe::program& prog, const tpipe::io_for<tpipe::uniform_pipeline<affine>>& io)
{
    auto pipe = make_pipe(prog.stages());
    tpipe::cpu_engine eng(prog.ranks);
    tpipe::run(pipe, prog, eng, io);
}

} // namespace

static_assert(std::derived_from<peer_transport, tpipe::link_transport>);

TEST_CASE("peer links: two ranks on different GPUs get a linked channel, two on one GPU a local one (the payload moves)",
          "[nccl][peer][seam]")
{
    tpipe::local_transport local;
    tpipe::detail::boundary<dvec, tpipe::local_transport> a;
    a.connect(local, tpipe::detail::boundary_ends::both_here, 0, 0, 1, 4);
    CHECK(!a.remote(true));
    CHECK(!a.remote(false));

    tpipe::nccl::fake::host_pool pool;
    tpipe::nccl::fake::world w(2);
    gpus g(w, 2);
    peer_transport x(g.copy(), {0, 1, 1}, g.streams_of({0, 1, 1}), {&pool, &pool, &pool});
    tpipe::detail::boundary<dvec, tpipe::link_transport> b, c;
    b.connect(x, tpipe::detail::boundary_ends::both_here, 0, 0, 1, 4);
    CHECK(b.remote(true));
    CHECK(b.remote(false));
    c.connect(x, tpipe::detail::boundary_ends::both_here, 1, 1, 2, 4);  // ranks 1 and 2 share GPU 1
    CHECK(!c.remote(true));
    CHECK(!c.remote(false));

    // The runner over peer copies is the runner of threads, MPI and NCCL.
    auto pipe = make_pipe(3);
    tpipe::cpu_engine eng(3);
    const auto prog = tpipe::make_schedule("gpipe").program(tpipe::topology{3}, tpipe::microbatches(2));
    tpipe::runner r(pipe, prog, eng, x);
    static_assert(std::is_same_v<decltype(r), tpipe::runner<decltype(pipe), tpipe::cpu_engine>>);
}

TEST_CASE("peer links: a pipeline over GPUs of one process equals the local run; same-GPU boundaries move, others copy",
          "[nccl][peer]")
{
    const int P = 3, M = 5;
    for (const char* name : {"gpipe", "1f1b", "zb-h1"}) {
        CAPTURE(name);
        const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
        std::mutex m;
        std::map<int, dvec> ref_out, ref_dx, out, dx;
        run_locally(prog, io_into(ref_out, ref_dx, m));
        tpipe::nccl::fake::host_pool pool;
        tpipe::nccl::fake::world w(2);
        gpus g(w, 2);
        peer_transport x(g.copy(), {0, 0, 1}, g.streams_of({0, 0, 1}), {&pool, &pool, &pool});  // ranks 0 and 1 share GPU 0
        auto pipe = make_pipe(P);
        tpipe::cpu_engine eng(P);
        tpipe::runner r(pipe, prog, eng, x);
        r.run(io_into(out, dx, m));
        r.run(io_into(out, dx, m));
        CHECK(out == ref_out);
        CHECK(dx == ref_dx);
        // Boundary 1 (GPU 0 to GPU 1) copies every payload both ways, boundary 0 none.
        const int nonempty = nonempty_samples(M);
        CHECK(w.device().copies() == static_cast<std::size_t>(2 * 2 * nonempty));
        CHECK(pool.made == 2 * 2 * M);
    }
}

TEST_CASE("composed transports: NCCL between processes (threads here), peer copies between the GPUs of each",
          "[nccl][peer][composed]")
{
    // 2 processes x 2 GPUs: ranks 0, 1 on process 0 (GPUs 0, 1), ranks 2, 3 on process 1 (GPUs
    // 0, 1). Boundaries 0 and 2 are peer copies inside a process, boundary 1 crosses over NCCL.
    const int P = 4, M = 5, processes = 2;
    const auto layout = tpipe::layout(P, 1, {0, 0, 1, 1});
    for (const char* name : {"gpipe", "1f1b"}) {
        CAPTURE(name);
        const auto prog = tpipe::make_schedule(name).program(tpipe::topology{P}, tpipe::microbatches(M));
        std::mutex m;
        std::map<int, dvec> ref_out, ref_dx, out, dx;
        run_locally(prog, io_into(ref_out, ref_dx, m));
        tpipe::nccl::fake::world w(2);  // one driver double for NCCL's kernels and the peer copies
        tpipe::nccl::fake::notice_board board(processes);
        tpipe::nccl::fake::host_pool nccl_pool;
        auto comms = w.init_all(processes);
        std::vector<std::unique_ptr<gpus>> process_gpus;
        for (int p = 0; p < processes; ++p) process_gpus.push_back(std::make_unique<gpus>(w, 2));
        std::vector<tpipe::nccl::fake::host_pool> gpu_pools(processes);
        auto errors = tpipe::nccl::fake::on_threads(processes, [&](int me) {
            tpipe::nccl::fake::control ctl(layout, me, board);
            tpipe::nccl::fake::transport between(tpipe::nccl::fake::api{&w}, comms[static_cast<std::size_t>(me)], ctl, nccl_pool);
            auto* pool = &gpu_pools[static_cast<std::size_t>(me)];
            gpus& mine = *process_gpus[static_cast<std::size_t>(me)];
            peer_transport within(mine.copy(), {0, 1, 0, 1}, mine.streams_of({0, 1, 0, 1}), {pool, pool, pool, pool});
            tpipe::composed_transport x(between, within);
            auto pipe = make_pipe(P);
            tpipe::cpu_engine eng(P);
            tpipe::runner r(pipe, prog, eng, x);
            r.run(io_into(out, dx, m));
        });
        for (const auto& e : errors) CHECK(e.empty());
        CHECK(out == ref_out);
        CHECK(dx == ref_dx);
        // Each process's inside boundary copied every non-empty payload both ways; NCCL's
        // receivers made the crossing boundary's payloads, both ways, on both processes.
        const int nonempty = nonempty_samples(M);
        CHECK(w.device().copies() == static_cast<std::size_t>(processes * 2 * nonempty));
        for (const auto& p : gpu_pools) CHECK(p.made == 2 * M);
        CHECK(nccl_pool.made == 2 * M);
    }
}

TEST_CASE("peer links: a failed copy is an error of the receiving rank, naming both GPUs", "[nccl][peer]")
{
    const auto prog = tpipe::make_schedule("gpipe").program(tpipe::topology{2}, tpipe::microbatches(2));
    tpipe::nccl::fake::host_pool pool;
    tpipe::nccl::fake::world w(2);
    gpus g(w, 2);
    w.device().fail_copies(1);  // the first copy fails on the device: cudaErrorIllegalAddress
    peer_transport x(g.copy(), {0, 1}, g.streams_of({0, 1}), {&pool, &pool});
    auto pipe = make_pipe(2);
    tpipe::cpu_engine eng(2);
    std::mutex m;
    std::map<int, dvec> out, dx;
    auto io = io_into(out, dx, m);
    io.source = [](const tpipe::unit&) { return dvec(2, 1.0); };
    tpipe::runner r(pipe, prog, eng, x);
    CHECK_THROWS_WITH(r.run(io), Catch::Contains("the copy of tag 0 from GPU 0 to GPU 1 failed: cudaErrorIllegalAddress: an illegal memory access was "
                                          "encountered"));
}
