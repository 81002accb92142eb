// Checkpoint write bandwidth (tpipe/state) against a plain write + fsync of the same bytes on
// the same disk, the cost of the snapshot (the only part of a save that stops training), and
// the shard checksum's speed (CRC-32C against format 1's FNV-1a), and the exact sum of squares
// of the gradient clip against a double fold.
//   bench_state [--benchmark_...]        writes under $TPIPE_BENCH_DIR (default: the temp dir)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <unistd.h>
#include <vector>

#include <tpipe/state/checkpoint_writer.hpp>
#include <tpipe/state/durable_file.hpp>
#include <tpipe/state/exact_square_sum.hpp>

namespace {

namespace fs = std::filesystem;

std::string bench_dir()
{
    const char* env = std::getenv("TPIPE_BENCH_DIR");
    const fs::path p = fs::path(env ? env : fs::temp_directory_path().string()) /
                       ("tpipe_bench_state_" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p.string();
}

std::vector<float> state_of(std::int64_t mib) { return std::vector<float>(static_cast<std::size_t>(mib) << 18, 0.5f); }

tpipe::state::shard_snapshot snapshot(const std::vector<float>& v, const std::string& file)
{
    tpipe::state::shard_snapshot s(file);
    s.add<float>("param/w", {static_cast<std::int64_t>(v.size())}, 0, std::span<const float>(v));
    return s;
}

//! A whole save: snapshot, shard write + fsync + checksum, manifest, rename, directory fsyncs.
void BM_checkpoint_save(benchmark::State& st)
{
    const auto v = state_of(st.range(0));
    const std::string dir = bench_dir();
    tpipe::state::checkpoint_writer out({.root = dir, .keep = 1});
    std::int64_t step = 0;
    for (auto _ : st) {
        tpipe::state::manifest m;
        m.step = ++step;
        std::vector<tpipe::state::shard_snapshot> mine;
        mine.push_back(snapshot(v, "rank-0.bin"));
        out.begin(std::move(m), std::move(mine));
        out.finish();
    }
    st.SetBytesProcessed(st.iterations() * static_cast<std::int64_t>(v.size() * sizeof(float)));
    fs::remove_all(dir);
}

//! The same bytes written and fsynced as one plain file (what `dd conv=fsync` does).
void BM_plain_write_fsync(benchmark::State& st)
{
    const auto v = state_of(st.range(0));
    const std::string dir = bench_dir();
    const auto bytes = std::as_bytes(std::span<const float>(v));
    for (auto _ : st) tpipe::state::write_durably(dir + "/plain.bin", std::span<const std::span<const std::byte>>(&bytes, 1));
    st.SetBytesProcessed(st.iterations() * static_cast<std::int64_t>(bytes.size()));
    fs::remove_all(dir);
}

//! The snapshot alone: the pause a save puts into training.
void BM_snapshot(benchmark::State& st)
{
    const auto v = state_of(st.range(0));
    for (auto _ : st) benchmark::DoNotOptimize(snapshot(v, "rank-0.bin"));
    st.SetBytesProcessed(st.iterations() * static_cast<std::int64_t>(v.size() * sizeof(float)));
}

//! The shard checksum alone, over 128 MiB: CRC-32C (format 2; arg 1: the SSE4.2 instruction,
//! 0: the portable table) against the FNV-1a 64 of format 1 (arg 2), on the same bytes.
void BM_checksum(benchmark::State& st)
{
    const auto v = state_of(128);
    const auto bytes = std::as_bytes(std::span<const float>(v));
    for (auto _ : st) {
        std::uint64_t h = 0;
        if (st.range(0) == 2) {
            tpipe::state::checksum fnv(tpipe::state::checksum_kind::fnv1a64);
            fnv.update(bytes);
            h = fnv.value();
        } else {
            h = tpipe::state::detail::crc32c_update(~0u, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                                                    st.range(0) == 1);
        }
        benchmark::DoNotOptimize(h);
    }
    st.SetBytesProcessed(st.iterations() * static_cast<std::int64_t>(bytes.size()));
}

//! The gradient clip's sum of squares over 16 Mi floats: exact (tpipe::exact_square_sum, arg 1)
//! against the double fold in eight lanes it replaced in the reference GPT (arg 0).
void BM_square_sum(benchmark::State& st)
{
    std::vector<float> g(std::size_t{16} << 20);
    std::uint32_t x = 12345;
    for (auto& v : g) {  // gradients of varied magnitude and sign
        x = x * 1664525u + 1013904223u;
        v = static_cast<float>(static_cast<std::int32_t>(x)) * 1e-12f;
    }
    for (auto _ : st) {
        if (st.range(0) == 1) {
            tpipe::exact_square_sum<float> s;
            s.add(g);
            benchmark::DoNotOptimize(s.value());
        } else {
            double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (std::size_t i = 0; i + 8 <= g.size(); i += 8)
                for (int k = 0; k < 8; ++k) acc[k] += double(g[i + k]) * double(g[i + k]);
            benchmark::DoNotOptimize(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
        }
    }
    st.SetItemsProcessed(st.iterations() * static_cast<std::int64_t>(g.size()));
}

} // namespace

BENCHMARK(BM_checkpoint_save)->Arg(16)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_plain_write_fsync)->Arg(16)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_snapshot)->Arg(16)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_checksum)->Arg(1)->Arg(0)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_square_sum)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
