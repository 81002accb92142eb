// MPI ping-pong: raw MPI_Send/MPI_Recv against the same ping-pong through
// tpipe::mpi::communicator send/recv awaited from a loop, and through the pipeline's
// tpipe::mpi::channel (a std::vector<std::byte> payload: header and body, the receiver builds
// the vector), 8 B ... 64 MiB, in the same run.
//
//   mpirun --oversubscribe --allow-run-as-root -np 2 build/bench/bench_mpi
//
// Rank 0 runs Google Benchmark and reports; rank 1 echoes. Before each timed run rank 0 sends
// rank 1 a control message (mode, bytes, iterations: Google Benchmark fixes the iteration
// count of a run before it starts), so rank 1 echoes exactly that many messages (plus one
// untimed warm-up round trip) with the same API; mode 0 ends the echo loop. The tpipe rows also time, right after, a raw ping-pong of
// the same iteration count twice: blocking MPI_Send/MPI_Recv (raw_us) and MPI_Isend/MPI_Irecv
// spun on MPI_Test (test_us, what a poller does without tpipe). They report one-way latencies
// (tpipe_us, raw_us, test_us, microseconds), added_us = tpipe_us - raw_us, and the bandwidth
// ratios bw_vs_raw = raw time / tpipe time and bw_vs_test = test time / tpipe time.
#include <benchmark/benchmark.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <span>
#include <vector>

#include "tpipe/exec/sync_wait.hpp"
#include "tpipe/exec/task.hpp"
#include "tpipe/mpi/channel.hpp"
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/mpi/environment.hpp"

namespace {

enum mode : std::int64_t { stop = 0, raw = 1, tpipe_comm = 2, raw_test = 3, tpipe_channel = 4 };

using bytes = std::vector<std::byte>;
using byte_channel = tpipe::mpi::channel<bytes>;
constexpr int channel_tags = 256;  // tags per channel "iteration": reset after this many messages

MPI_Comm control = MPI_COMM_NULL;   // control messages
MPI_Comm raw_comm = MPI_COMM_NULL;  // raw ping-pong
MPI_Comm channel_comm = MPI_COMM_NULL;  // tpipe::mpi::channel ping-pong
tpipe::mpi::communicator* comm = nullptr;

void tell(std::int64_t m, std::int64_t bytes, std::int64_t iterations)
{
    const std::int64_t msg[3] = {m, bytes, iterations};
    MPI_Send(msg, 3, MPI_INT64_T, 1, 0, control);
}

void raw_ping(std::vector<std::byte>& buf, int peer)
{
    MPI_Send(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, peer, 0, raw_comm);
    MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, peer, 0, raw_comm, MPI_STATUS_IGNORE);
}

//! Nonblocking MPI spun on MPI_Test: what a loop's poller does, without tpipe.
void wait_spin(MPI_Request& r)
{
    int flag = 0;
    while (!flag) MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
}

void raw_test_send(std::vector<std::byte>& buf, int peer)
{
    MPI_Request r;
    MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, peer, 0, raw_comm, &r);
    wait_spin(r);
}

void raw_test_recv(std::vector<std::byte>& buf, int peer)
{
    MPI_Request r;
    MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, peer, 0, raw_comm, &r);
    wait_spin(r);
}

double raw_seconds(mode m, std::vector<std::byte>& buf, std::int64_t iterations)
{
    tell(m, static_cast<std::int64_t>(buf.size()), iterations + 1);
    auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t i = 0; i < iterations + 1; ++i) {
        if (i == 1) t0 = std::chrono::steady_clock::now();  // the first round trip warms up
        if (m == raw) raw_ping(buf, 1);
        else {
            raw_test_send(buf, 1);
            raw_test_recv(buf, 1);
        }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void BM_mpi_raw(benchmark::State& state)
{
    std::vector<std::byte> buf(static_cast<std::size_t>(state.range(0)));
    tell(raw, state.range(0), static_cast<std::int64_t>(state.max_iterations) + 1);
    raw_ping(buf, 1);  // warm-up
    for (auto _ : state) raw_ping(buf, 1);
    state.SetBytesProcessed(2 * state.range(0) * static_cast<std::int64_t>(state.iterations()));
}

void BM_mpi_tpipe(benchmark::State& state)
{
    std::vector<std::byte> buf(static_cast<std::size_t>(state.range(0)));
    const auto iterations = static_cast<std::int64_t>(state.max_iterations);
    tell(tpipe_comm, state.range(0), iterations + 1);
    std::chrono::steady_clock::time_point t0;
    tpipe::sync_wait([](benchmark::State& s, std::vector<std::byte>& b, std::chrono::steady_clock::time_point& start) -> tpipe::task<void> {
        co_await comm->send(1, 0, b);  // warm-up
        co_await comm->recv(1, 0, b);
        start = std::chrono::steady_clock::now();
        for (auto _ : s) {
            co_await comm->send(1, 0, b);
            co_await comm->recv(1, 0, b);
        }
    }(state, buf, t0));
    const double tpipe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double raw_s = raw_seconds(raw, buf, iterations);
    const double test_s = raw_seconds(raw_test, buf, iterations);
    const double one_way = 1e6 / static_cast<double>(iterations) / 2;
    state.SetBytesProcessed(2 * state.range(0) * iterations);
    state.counters["tpipe_us"] = tpipe_s * one_way;  // one-way latency, this row
    state.counters["raw_us"] = raw_s * one_way;      // blocking MPI_Send/MPI_Recv, same iterations
    state.counters["test_us"] = test_s * one_way;    // MPI_Isend/MPI_Irecv spun on MPI_Test
    state.counters["added_us"] = (tpipe_s - raw_s) * one_way;
    state.counters["bw_vs_raw"] = raw_s / tpipe_s;
    state.counters["bw_vs_test"] = test_s / tpipe_s;
}

//! `n` round trips through two channels: send on `out`, receive on `in` (or the reverse when
//! `echo`), starting a new channel iteration every channel_tags messages.
tpipe::task<void> channel_ping(byte_channel& out, byte_channel& in, bytes payload, std::int64_t n, bool echo)
{
    for (std::int64_t i = 0; i < n; ++i) {
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
}

void BM_mpi_channel(benchmark::State& state)
{
    const auto iterations = static_cast<std::int64_t>(state.max_iterations);
    tell(tpipe_channel, state.range(0), iterations + 1);
    byte_channel out(channel_comm, 1, 0, true, channel_tags), in(channel_comm, 1, 2 * channel_tags, false, channel_tags);
    bytes buf(static_cast<std::size_t>(state.range(0)));
    tpipe::sync_wait(channel_ping(out, in, buf, 1, false));  // warm-up
    out.reset(channel_tags);
    in.reset(channel_tags);
    const auto t0 = std::chrono::steady_clock::now();
    tpipe::sync_wait([](benchmark::State& s, byte_channel& o, byte_channel& i, bytes b) -> tpipe::task<void> {
        std::int64_t k = 0;
        for (auto _ : s) {
            const int tag = static_cast<int>(k++ % channel_tags);
            if (tag == 0 && k > 1) {
                co_await o.drain();
                o.reset(channel_tags);
                i.reset(channel_tags);
            }
            o.send(tag, std::move(b));
            i.post(tag);
            co_await i.arrival(tag);
            b = i.take(tag);
        }
        co_await o.drain();
    }(state, out, in, std::move(buf)));
    const double tpipe_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes raw_buf(static_cast<std::size_t>(state.range(0)));
    const double raw_s = raw_seconds(raw, raw_buf, iterations);
    const double one_way = 1e6 / static_cast<double>(iterations) / 2;
    state.SetBytesProcessed(2 * state.range(0) * iterations);
    state.counters["tpipe_us"] = tpipe_s * one_way;
    state.counters["raw_us"] = raw_s * one_way;
    state.counters["added_us"] = (tpipe_s - raw_s) * one_way;
    state.counters["bw_vs_raw"] = raw_s / tpipe_s;
}

void echo_loop()
{
    std::vector<std::byte> buf;
    for (;;) {
        std::int64_t msg[3];
        MPI_Recv(msg, 3, MPI_INT64_T, 0, 0, control, MPI_STATUS_IGNORE);
        if (msg[0] == stop) return;
        buf.resize(static_cast<std::size_t>(msg[1]));
        if (msg[0] == raw) {
            for (std::int64_t i = 0; i < msg[2]; ++i) {
                MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, 0, 0, raw_comm, MPI_STATUS_IGNORE);
                MPI_Send(buf.data(), static_cast<int>(buf.size()), MPI_BYTE, 0, 0, raw_comm);
            }
        } else if (msg[0] == raw_test) {
            for (std::int64_t i = 0; i < msg[2]; ++i) {
                raw_test_recv(buf, 0);
                raw_test_send(buf, 0);
            }
        } else if (msg[0] == tpipe_channel) {
            byte_channel in(channel_comm, 0, 0, false, channel_tags), out(channel_comm, 0, 2 * channel_tags, true, channel_tags);
            tpipe::sync_wait(channel_ping(out, in, {}, 1, true));  // warm-up
            out.reset(channel_tags);
            in.reset(channel_tags);
            tpipe::sync_wait(channel_ping(out, in, {}, msg[2] - 1, true));
        } else {
            tpipe::sync_wait([](std::vector<std::byte>& b, std::int64_t n) -> tpipe::task<void> {
                for (std::int64_t i = 0; i < n; ++i) {
                    co_await comm->recv(0, 0, b);
                    co_await comm->send(0, 0, b);
                }
            }(buf, msg[2]));
        }
    }
}

} // namespace

BENCHMARK(BM_mpi_raw)->RangeMultiplier(4)->Range(8, 64 << 20);
BENCHMARK(BM_mpi_tpipe)->RangeMultiplier(4)->Range(8, 64 << 20);
BENCHMARK(BM_mpi_channel)->RangeMultiplier(4)->Range(8, 64 << 20);

int main(int argc, char** argv)
{
    // TPIPE_BENCH_PROGRESS=0: without the progress thread (to see what it costs).
    const char* progress = std::getenv("TPIPE_BENCH_PROGRESS");
    const bool with_progress = !(progress && std::string(progress) == "0");
    tpipe::mpi::environment env(argc, argv, {.progress = with_progress});
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) std::fprintf(stderr, "bench_mpi: run it with exactly 2 processes (mpirun -np 2), not %d\n", size);
        return 2;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &control);
    MPI_Comm_dup(MPI_COMM_WORLD, &raw_comm);
    MPI_Comm_dup(MPI_COMM_WORLD, &channel_comm);
    {
        tpipe::mpi::communicator c = tpipe::mpi::communicator::world();
        comm = &c;
        benchmark::Initialize(&argc, argv);
        if (rank == 0) {
            benchmark::AddCustomContext("mpi", with_progress ? "MPI_THREAD_MULTIPLE, tpipe progress thread on" : "MPI_THREAD_MULTIPLE, no progress thread");
            benchmark::RunSpecifiedBenchmarks();
            tell(stop, 0, 0);
        } else {
            echo_loop();
        }
        benchmark::Shutdown();
        comm = nullptr;
    }
    MPI_Comm_free(&channel_comm);
    MPI_Comm_free(&raw_comm);
    MPI_Comm_free(&control);
    return 0;
}
