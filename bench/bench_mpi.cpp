// MPI: tpipe against raw MPI in the same run, as paired repetitions.
//
//   mpirun --oversubscribe --allow-run-as-root -np 2 build/bench/bench_mpi     # ping-pong + all-reduce
//   mpirun --oversubscribe --allow-run-as-root -np 8 build/bench/bench_mpi     # all-reduce only
//
// Rank 0 runs Google Benchmark and reports; before each run it broadcasts (mode, bytes, reps, k)
// so the other ranks run exactly the same sequence. Every benchmark iteration is one pair: a
// block of k operations through tpipe and a block of k through raw MPI, back to back in one
// window (which goes first alternates), so load on the machine hits both alike. The ratios are
// medians over the pairs.
//
// - BM_mpi_comm / BM_mpi_channel (np 2): ping-pong through tpipe::mpi::communicator send/recv
//   awaited from a loop, or the pipeline's channel, tpipe::linked_channel over an MPI link (a std::vector<std::byte>
//   payload: header and body, the receiver builds the vector, from tpipe::payload_pool unless
//   TPIPE_BENCH_POOL=0), against blocking MPI_Send/MPI_Recv. Counters: one-way latencies
//   tpipe_us and raw_us (medians), added_us (median of the pairs' differences), bw_vs_raw
//   (median of raw time / tpipe time: 1 is raw's bandwidth), pool_hits (channel).
// - BM_ucx_channel (np 2, built with TPIPE_ENABLE_UCX): the same channel over a UCX link
//   (tpipe/ucx/link.hpp) against the same raw MPI.
// - BM_allreduce (np >= 2): tpipe::mpi::communicator::all_reduce_sum of `bytes` of float in the
//   ring order (the default), then the rank-order fold, then MPI_Allreduce of the same buffer.
//   Counters: ring_ms, rank_order_ms, mpi_ms (medians per all-reduce), ring_vs_mpi and
//   rank_order_vs_mpi (medians of mpi time / tpipe time: > 1 is faster than MPI_Allreduce),
//   sent_per_step and recv_per_step (bytes this member's ring moved per all-reduce, counted by
//   the communicator), ideal_per_step (2 N (D - 1) / D), and zero_state (bytes of AdamW state
//   rank 0 keeps with tpipe::sharded_optimizer, 8 per element of its shard) against
//   replicated_state (8 per element).
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/transport/payload_pool.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/mpi/link.hpp"
#include "tpipe/transport/linked_channel.hpp"
#ifdef TPIPE_BENCH_UCX
#include "tpipe/ucx/link.hpp"
#endif
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/mpi/environment.hpp"

namespace {

enum mode : std::int64_t { stop = 0, comm_pingpong = 1, channel_pingpong = 2, allreduce = 3, ucx_channel_pingpong = 4 };

using bytes = std::vector<std::byte>;
using byte_channel = tpipe::linked_channel<bytes>;
using clock_type = std::chrono::steady_clock;
constexpr int channel_tags = 256;  // tags per channel "iteration": reset after this many messages
constexpr int reps = 9;            // pairs per benchmark

MPI_Comm control = MPI_COMM_NULL;       // control messages
MPI_Comm raw_comm = MPI_COMM_NULL;      // raw MPI
MPI_Comm channel_comm = MPI_COMM_NULL;  // the pipeline's channel
tpipe::mpi::communicator* comm = nullptr;
#ifdef TPIPE_BENCH_UCX
tpipe::ucx::link_engine* ucx = nullptr;  // BM_ucx_channel's links
#endif

struct order {
    std::int64_t m, bytes, k;
};

order broadcast_order(order o)
{
    std::int64_t msg[3] = {o.m, o.bytes, o.k};
    MPI_Bcast(msg, 3, MPI_INT64_T, 0, control);
    return {msg[0], msg[1], msg[2]};
}

double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

template <class F>
double seconds(F f)
{
    const auto t0 = clock_type::now();
    f();
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

//! Operations per block: enough bytes that a block is not all timer noise, at least 2.
std::int64_t per_block(std::int64_t size, std::int64_t budget) { return std::clamp<std::int64_t>(budget / std::max<std::int64_t>(size, 1), 2, 2000); }

// ---- ping-pong blocks: rank 0 pings, rank 1 echoes ---------------------------------------

void raw_block(bytes& buf, std::int64_t k, bool echo)
{
    const int n = static_cast<int>(buf.size()), peer = echo ? 0 : 1;
    for (std::int64_t i = 0; i < k; ++i) {
        if (echo) MPI_Recv(buf.data(), n, MPI_BYTE, peer, 0, raw_comm, MPI_STATUS_IGNORE);
        MPI_Send(buf.data(), n, MPI_BYTE, peer, 0, raw_comm);
        if (!echo) MPI_Recv(buf.data(), n, MPI_BYTE, peer, 0, raw_comm, MPI_STATUS_IGNORE);
    }
}

void comm_block(bytes& buf, std::int64_t k, bool echo)
{
    tpipe::sync_wait([](bytes& b, std::int64_t n, bool e) -> tpipe::task<void> {
        const int peer = e ? 0 : 1;
        for (std::int64_t i = 0; i < n; ++i) {
            if (e) co_await comm->recv(peer, 0, b);
            co_await comm->send(peer, 0, b);
            if (!e) co_await comm->recv(peer, 0, b);
        }
    }(buf, k, echo));
}

//! k round trips through two channels (one per direction), a new channel iteration every
//! channel_tags messages; the payload travels back and forth and ends in `payload`.
tpipe::task<void> channel_ping(byte_channel& out, byte_channel& in, bytes& payload, std::int64_t k, bool echo)
{
    for (std::int64_t i = 0; i < k; ++i) {
        const int tag = static_cast<int>(i % channel_tags);
        if (tag == 0 && i > 0) {
            co_await out.drain();
            out.reset(channel_tags);
            in.reset(channel_tags);
        }
        if (!echo) out.send(tag, std::move(payload));
        in.post(tag);
        co_await in.arrival(tag);
        payload = in.take(tag);
        if (echo) out.send(tag, std::move(payload));
    }
    co_await out.drain();
    out.reset(channel_tags);
    in.reset(channel_tags);
}

//! One end of the ping-pong's channels: the ping (rank 0) sends forward and receives backward.
std::unique_ptr<tpipe::link> open_link(mode m, bool echo, bool sending)
{
    const bool forward = sending != echo;
    const int peer = echo ? 0 : 1;
#ifdef TPIPE_BENCH_UCX
    if (m == ucx_channel_pingpong)
        return ucx->open({.boundary = 0, .forward = forward, .from_rank = forward ? 0 : 1, .to_rank = forward ? 1 : 0,
                          .sending = sending, .tags = channel_tags},
                         peer);
#else
    (void)m;
#endif
    return std::make_unique<tpipe::mpi::link>(channel_comm, peer, forward ? 0 : 2 * channel_tags, channel_tags);
}

struct channel_pair {
    byte_channel out, in;
    channel_pair(mode m, bool echo)
        : out(open_link(m, echo, true), tpipe::channel_end::sender, channel_tags),
          in(open_link(m, echo, false), tpipe::channel_end::receiver, channel_tags)
    {
    }
};

//! One pingpong benchmark's sequence, on both ranks: `reps` pairs of (tpipe block, raw block),
//! alternating which goes first; returns the blocks' seconds (rank 0's are the ones reported).
void pingpong_pairs(mode m, std::int64_t size, std::int64_t k, bool echo, std::vector<double>& tp, std::vector<double>& raw)
{
    bytes buf(static_cast<std::size_t>(size)), payload(static_cast<std::size_t>(size));
    channel_pair ch(m, echo);
    auto tpipe_block = [&] {
        if (m == comm_pingpong) comm_block(buf, k, echo);
        else tpipe::sync_wait(channel_ping(ch.out, ch.in, payload, k, echo));
    };
    tpipe_block();  // warm-up of both
    raw_block(buf, 1, echo);
    for (int r = 0; r < reps; ++r) {
        if (r % 2 == 0) {
            tp.push_back(seconds(tpipe_block));
            raw.push_back(seconds([&] { raw_block(buf, k, echo); }));
        } else {
            raw.push_back(seconds([&] { raw_block(buf, k, echo); }));
            tp.push_back(seconds(tpipe_block));
        }
    }
}

void BM_pingpong(benchmark::State& state, mode m)
{
    const std::int64_t size = state.range(0), k = per_block(size, std::int64_t{32} << 20);
    broadcast_order({m, size, k});
    const auto hits0 = tpipe::payload_pool<bytes>::global().hits();
    std::vector<double> tp, raw;
    pingpong_pairs(m, size, k, false, tp, raw);
    std::size_t i = 0;
    for (auto _ : state) state.SetIterationTime(tp[i++ % tp.size()]);  // the pairs ran above, with the echoing rank
    std::vector<double> ratio, added;
    for (i = 0; i < tp.size(); ++i) {
        ratio.push_back(raw[i] / tp[i]);
        added.push_back((tp[i] - raw[i]) * 1e6 / static_cast<double>(2 * k));
    }
    const double one_way = 1e6 / static_cast<double>(2 * k);
    state.counters["tpipe_us"] = median(tp) * one_way;
    state.counters["raw_us"] = median(raw) * one_way;
    state.counters["added_us"] = median(added);
    state.counters["bw_vs_raw"] = median(ratio);
    state.counters["k"] = static_cast<double>(k);
    if (m != comm_pingpong) state.counters["pool_hits"] = static_cast<double>(tpipe::payload_pool<bytes>::global().hits() - hits0);
    state.SetBytesProcessed(2 * size * k * static_cast<std::int64_t>(tp.size()));
}

// ---- all-reduce: every rank ------------------------------------------------------------------

struct allreduce_times {
    std::vector<double> ring, rank_order, mpi;
    tpipe::mpi::collective_traffic traffic{};  // of the ring blocks
};

allreduce_times allreduce_pairs(std::int64_t size, std::int64_t k)
{
    std::vector<float> v(static_cast<std::size_t>(size) / sizeof(float), 0.0f);  // zeros: sums stay finite
    allreduce_times out;
    auto tpipe_block = [&](tpipe::reduction_order o) {
        comm->set_reduction_order(o);
        tpipe::sync_wait([](std::vector<float>& x, std::int64_t n) -> tpipe::task<void> {
            for (std::int64_t i = 0; i < n; ++i) co_await comm->all_reduce_sum(std::span<float>(x));
        }(v, k));
    };
    auto mpi_block = [&] {
        for (std::int64_t i = 0; i < k; ++i)
            MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_FLOAT, MPI_SUM, raw_comm);
    };
    auto timed = [&](auto f) {
        MPI_Barrier(raw_comm);  // every rank starts the block together
        return seconds(f) / static_cast<double>(k);
    };
    tpipe_block(tpipe::reduction_order::ring);  // warm-up
    mpi_block();
    for (int r = 0; r < reps; ++r) {
        const auto before = comm->traffic();
        auto ring = [&] { out.ring.push_back(timed([&] { tpipe_block(tpipe::reduction_order::ring); })); };
        auto ro = [&] { out.rank_order.push_back(timed([&] { tpipe_block(tpipe::reduction_order::rank_order); })); };
        auto mpi = [&] { out.mpi.push_back(timed(mpi_block)); };
        if (r % 2 == 0) {
            ring(), ro(), mpi();
        } else {
            mpi(), ro(), ring();
        }
        const auto after = comm->traffic();
        out.traffic.sent += (after.sent - before.sent) / static_cast<std::uint64_t>(k);
        out.traffic.received += (after.received - before.received) / static_cast<std::uint64_t>(k);
    }
    out.traffic.sent /= reps;
    out.traffic.received /= reps;
    comm->set_reduction_order(tpipe::reduction_order::ring);
    return out;
}

void BM_allreduce(benchmark::State& state)
{
    const std::int64_t size = state.range(0), k = per_block(size, std::int64_t{4} << 20);  // few: D = 8 on 2 cores is slow
    broadcast_order({allreduce, size, k});
    const auto t = allreduce_pairs(size, k);
    std::size_t it = 0;
    for (auto _ : state) state.SetIterationTime(t.ring[it++ % t.ring.size()]);
    std::vector<double> ring_vs, ro_vs;
    for (std::size_t i = 0; i < t.ring.size(); ++i) {
        ring_vs.push_back(t.mpi[i] / t.ring[i]);
        ro_vs.push_back(t.mpi[i] / t.rank_order[i]);
    }
    const int d = comm->size();
    const std::size_t n = static_cast<std::size_t>(size) / sizeof(float);
    state.counters["D"] = d;
    state.counters["ring_ms"] = median(t.ring) * 1e3;
    state.counters["rank_order_ms"] = median(t.rank_order) * 1e3;
    state.counters["mpi_ms"] = median(t.mpi) * 1e3;
    state.counters["ring_vs_mpi"] = median(ring_vs);
    state.counters["rank_order_vs_mpi"] = median(ro_vs);
    state.counters["sent_per_step"] = static_cast<double>(t.traffic.sent);
    state.counters["recv_per_step"] = static_cast<double>(t.traffic.received);
    state.counters["ideal_per_step"] = 2.0 * static_cast<double>(size) * (d - 1) / d;
    state.counters["zero_state"] = 8.0 * static_cast<double>(tpipe::ring_segment(n, d, 0).size);
    state.counters["replicated_state"] = 8.0 * static_cast<double>(n);
}

void follow()
{
    for (;;) {
        const order o = broadcast_order({});
        if (o.m == stop) return;
        if (o.m == allreduce) {
            allreduce_pairs(o.bytes, o.k);
        } else {
            std::vector<double> tp, raw;
            pingpong_pairs(static_cast<mode>(o.m), o.bytes, o.k, true, tp, raw);
        }
    }
}

} // namespace

int main(int argc, char** argv)
{
    // TPIPE_BENCH_PROGRESS=0: without the progress thread; TPIPE_BENCH_POOL=0: no payload pool.
    const char* progress = std::getenv("TPIPE_BENCH_PROGRESS");
    const bool with_progress = !(progress && std::string(progress) == "0");
    const char* pool = std::getenv("TPIPE_BENCH_POOL");
    const bool with_pool = !(pool && std::string(pool) == "0");
    if (!with_pool) tpipe::payload_pool<bytes>::global().set_limits({.min_bytes = SIZE_MAX});
    tpipe::mpi::environment env(argc, argv, {.progress = with_progress});
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        std::fprintf(stderr, "bench_mpi: run it with 2 processes or more (mpirun -np 2 ... -np 8), not %d\n", size);
        return 2;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &control);
    MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &channel_comm);
    {
        tpipe::mpi::communicator c = tpipe::mpi::communicator::world();
        comm = &c;
#ifdef TPIPE_BENCH_UCX
        tpipe::ucx::link_engine u(MPI_COMM_WORLD);
        ucx = &u;
#endif
        benchmark::Initialize(&argc, argv);
        if (size == 2) {
            benchmark::RegisterBenchmark("BM_mpi_comm", BM_pingpong, comm_pingpong)->RangeMultiplier(4)->Range(8, 64 << 20)->UseManualTime()->Iterations(reps);
            benchmark::RegisterBenchmark("BM_mpi_channel", BM_pingpong, channel_pingpong)->RangeMultiplier(4)->Range(8, 64 << 20)->UseManualTime()->Iterations(reps);
#ifdef TPIPE_BENCH_UCX
            benchmark::RegisterBenchmark("BM_ucx_channel", BM_pingpong, ucx_channel_pingpong)->RangeMultiplier(4)->Range(8, 64 << 20)->UseManualTime()->Iterations(reps);
#endif
        }
        benchmark::RegisterBenchmark("BM_allreduce", BM_allreduce)->RangeMultiplier(8)->Range(256 << 10, 16 << 20)->UseManualTime()->Iterations(reps);
        if (rank == 0) {
            benchmark::AddCustomContext("mpi", std::string(with_progress ? "progress thread on" : "no progress thread") +
                                                   (with_pool ? ", payload pool on" : ", payload pool off") + ", " + std::to_string(size) + " processes");
            benchmark::RunSpecifiedBenchmarks();
            broadcast_order({stop, 0, 0});
        } else {
            follow();
        }
        benchmark::Shutdown();
        comm = nullptr;
    }
    MPI_Comm_free(&channel_comm);
    MPI_Comm_free(&raw_comm);
    MPI_Comm_free(&control);
    return 0;
}
