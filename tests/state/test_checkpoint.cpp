#include <catch2/catch.hpp>

#include <barrier>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tpipe/state/checkpoint_reader.hpp"
#include "tpipe/state/checkpoint_writer.hpp"

using namespace tpipe::state;
namespace fs = std::filesystem;

namespace {

//! A fresh directory under the system's temporary directory, removed at the end.
struct scratch {
    fs::path root;
    explicit scratch(const std::string& tag)
        : root(fs::temp_directory_path() / ("tpipe_state_" + tag + "_" + std::to_string(::getpid())))
    {
        fs::remove_all(root);
        fs::create_directories(root);
    }
    ~scratch() { fs::remove_all(root); }
    std::string run() const { return (root / "run").string(); }
};

std::vector<float> iota_floats(std::size_t n, float start)
{
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i);
    return v;
}

manifest base(std::int64_t step)
{
    manifest m;
    m.step = step;
    m.model = tpipe::json::object{{"layers", 2}};
    return m;
}

//! Tensor "w" (10 floats, shape 2x5) split [0,6) | [6,10) over two shards, "m" (3 doubles) in the second.
std::vector<shard_snapshot> two_shards(const std::vector<float>& w)
{
    shard_snapshot a("rank-0.bin"), b("rank-1.bin");
    a.add<float>("w", {2, 5}, 0, std::span<const float>(w).subspan(0, 6));
    b.add<float>("w", {2, 5}, 6, std::span<const float>(w).subspan(6));
    const std::vector<double> m{1.5, -2.0, 3.25};
    b.add<double>("m", {3}, 0, m);
    return {std::move(a), std::move(b)};
}

void save(const std::string& run, std::int64_t step, const std::vector<float>& w, int keep = 0)
{
    checkpoint_writer out({.root = run, .keep = keep, .shards = 2});
    out.begin(base(step), two_shards(w));
    out.finish();
}

void overwrite_byte(const fs::path& p, std::streamoff at)
{
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    char c = 0;
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x5a));
}

} // namespace

TEST_CASE("checksum is 64-bit FNV-1a, fed in pieces", "[state]")
{
    checksum empty;
    CHECK(empty.hex() == "cbf29ce484222325");
    checksum a;
    const std::string text = "a";
    a.update(std::as_bytes(std::span<const char>(text)));
    CHECK(a.hex() == "af63dc4c8601ec8c");
    const std::string all = "checkpoint shards";
    checksum whole, pieces;
    whole.update(std::as_bytes(std::span<const char>(all)));
    pieces.update(std::as_bytes(std::span<const char>(all).subspan(0, 5)));
    pieces.update(std::as_bytes(std::span<const char>(all).subspan(5)));
    CHECK(whole.value() == pieces.value());
    CHECK(checksum::from_hex(whole.hex(), "x") == whole.value());
    CHECK_THROWS_AS(checksum::from_hex("12", "x"), tpipe::parse_error);
}

TEST_CASE("a checkpoint reads back bitwise under another sharding of its named ranges", "[state]")
{
    scratch s("roundtrip");
    const auto w = iota_floats(10, -1.0f);
    save(s.run(), 7, w);
    checkpoint_reader in(s.run());
    CHECK(in.path() == checkpoint_directory(s.run()).committed_path(7));
    CHECK(in.contents().step == 7);
    CHECK(tpipe::json::dump(in.contents().model) == "{\"layers\":2}");
    std::vector<float> whole(10);
    in.read_tensor<float>("w", {2, 5}, whole);
    CHECK(whole == w);
    // A loader that owns elements [3, 8) reads across the two shards.
    std::vector<float> middle(5);
    in.read<float>("w", 3, middle);
    CHECK(middle == std::vector<float>(w.begin() + 3, w.begin() + 8));
    std::vector<double> m(3);
    in.read<double>("m", 0, m);
    CHECK(m == std::vector<double>{1.5, -2.0, 3.25});
    CHECK_THROWS_AS(in.read_tensor<float>("w", {10}, whole), incompatible_checkpoint);
    std::vector<double> wrong(2);
    CHECK_THROWS_WITH(in.read<double>("w", 0, wrong), Catch::Contains("is f32, asked for as f64"));
    CHECK_THROWS_WITH(in.read<float>("nope", 0, middle), Catch::Contains("has no tensor \"nope\""));
}

TEST_CASE("a range no shard holds is refused", "[state]")
{
    scratch s("coverage");
    const auto w = iota_floats(10, 0.0f);
    shard_snapshot a("only.bin");
    a.add<float>("w", {10}, 0, std::span<const float>(w).subspan(0, 6));
    checkpoint_writer out({.root = s.run(), .shards = 1});
    out.begin(base(1), {std::move(a)});
    out.finish();
    checkpoint_reader in(s.run());
    std::vector<float> tail(6);
    CHECK_THROWS_WITH(in.read<float>("w", 4, tail), Catch::Contains("no shard holds elements from 6 of tensor \"w\""));
}

TEST_CASE("keep-K keeps the newest checkpoints; resume finds the newest", "[state]")
{
    scratch s("keep");
    for (int step = 1; step <= 5; ++step) save(s.run(), step * 10, iota_floats(10, float(step)), 2);
    checkpoint_directory d(s.run());
    CHECK(d.committed() == std::vector<std::int64_t>{40, 50});
    CHECK(d.partial().empty());
    CHECK(checkpoint_directory::resolve(s.run()) == d.committed_path(50));
}

TEST_CASE("an interrupted save leaves the previous checkpoint whole and is refused on its own", "[state]")
{
    scratch s("partial");
    const auto w = iota_floats(10, 3.0f);
    save(s.run(), 1, w);
    {
        checkpoint_writer out({.root = s.run(), .shards = 2});
        out.begin(base(2), two_shards(iota_floats(10, 9.0f)));
        // destroyed without finish(): the shards may be written, nothing is committed
    }
    checkpoint_directory d(s.run());
    CHECK(d.committed() == std::vector<std::int64_t>{1});
    CHECK(d.partial() == std::vector<std::int64_t>{2});
    checkpoint_reader in(s.run());
    std::vector<float> back(10);
    in.read_tensor<float>("w", {2, 5}, back);
    CHECK(back == w);
    CHECK_THROWS_AS(checkpoint_reader(d.partial_path(2)), incomplete_checkpoint);
    CHECK_THROWS_WITH(checkpoint_reader(d.partial_path(2)), Catch::Contains("is a half-written checkpoint"));
    // The next save clears the leftover.
    save(s.run(), 3, w);
    CHECK(d.partial().empty());
    // A run directory with only a half-written save.
    fs::remove_all(d.committed_path(1));
    fs::remove_all(d.committed_path(3));
    fs::create_directory(d.partial_path(4));
    CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("holds only a half-written checkpoint"));
}

TEST_CASE("missing, truncated and corrupted shards are refused naming the file", "[state]")
{
    scratch s("corrupt");
    save(s.run(), 5, iota_floats(10, 1.0f));
    const fs::path at = checkpoint_directory(s.run()).committed_path(5);
    const fs::path shard = at / "rank-1.bin";
    const auto size = fs::file_size(shard);

    overwrite_byte(shard, 3);
    CHECK_THROWS_AS(checkpoint_reader(s.run()), corrupt_checkpoint);
    CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains(shard.string()) && Catch::Contains("fails its checksum"));
    overwrite_byte(shard, 3);  // restored
    CHECK_NOTHROW(checkpoint_reader(s.run()));

    fs::resize_file(shard, size - 4);
    CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("(truncated)") && Catch::Contains("rank-1.bin"));
    fs::remove(shard);
    CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("rank-1.bin\" is missing"));
}

TEST_CASE("a damaged manifest, another format version and a non-checkpoint are refused", "[state]")
{
    scratch s("manifest");
    save(s.run(), 2, iota_floats(10, 1.0f));
    const fs::path mpath = fs::path(checkpoint_directory(s.run()).committed_path(2)) / manifest_file;
    std::string text = tpipe::read_file(mpath.string(), "manifest");

    {
        std::ofstream(mpath, std::ios::trunc) << text.substr(0, text.size() / 2);
        CHECK_THROWS_AS(checkpoint_reader(s.run()), corrupt_checkpoint);
        CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("is not valid JSON"));
    }
    {
        auto v = tpipe::json::parse(text).as_object();
        v["format"] = 99;
        std::ofstream(mpath, std::ios::trunc) << tpipe::json::dump(tpipe::json::value(v));
        CHECK_THROWS_AS(checkpoint_reader(s.run()), incompatible_checkpoint);
        CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("has format version 99; this tpipe reads version 1"));
    }
    const std::string empty = (s.root / "empty").string();
    fs::create_directory(empty);
    CHECK_THROWS_AS(checkpoint_reader(empty), not_a_checkpoint);
    CHECK_THROWS_WITH(checkpoint_reader(empty), Catch::Contains("is not a checkpoint"));
    CHECK_THROWS_WITH(checkpoint_reader((s.root / "absent").string()), Catch::Contains("does not exist"));
}

TEST_CASE("processes each write their own shard; the leader commits after the barrier", "[state]")
{
    scratch s("processes");
    constexpr int n = 3;
    std::barrier meet(n);
    const auto w = iota_floats(30, 0.5f);
    auto process = [&](int rank) {
        checkpoint_writer out({.root = s.run(), .keep = 1, .leader = rank == 0, .shards = n,
                               .barrier = [&] { meet.arrive_and_wait(); }});
        for (std::int64_t step = 1; step <= 3; ++step) {
            shard_snapshot mine("rank-" + std::to_string(rank) + ".bin");
            std::vector<float> piece(w.begin() + rank * 10, w.begin() + rank * 10 + 10);
            for (auto& x : piece) x += static_cast<float>(step);
            mine.add<float>("w", {30}, rank * 10, std::span<const float>(piece));
            out.begin(base(step), {std::move(mine)});
        }
        out.finish();
    };
    std::vector<std::thread> ts;
    for (int r = 0; r < n; ++r) ts.emplace_back(process, r);
    for (auto& t : ts) t.join();
    checkpoint_reader in(s.run());
    CHECK(in.contents().step == 3);
    CHECK(in.contents().shards.size() == 3);
    std::vector<float> back(30);
    in.read<float>("w", 0, back);
    for (std::size_t i = 0; i < 30; ++i) CHECK(back[i] == w[i] + 3.0f);
    CHECK(checkpoint_directory(s.run()).committed() == std::vector<std::int64_t>{3});
}

TEST_CASE("a save missing a shard, or that cannot write, commits nothing", "[state]")
{
    scratch s("unwritable");
    const auto w = iota_floats(10, 2.0f);
    save(s.run(), 1, w);
    {  // three shards expected (a process that never wrote its own): the leader refuses to commit
        checkpoint_writer out({.root = s.run(), .shards = 3});
        out.begin(base(2), two_shards(w));
        CHECK_THROWS_AS(out.finish(), write_error);
    }
    checkpoint_directory d(s.run());
    CHECK(d.committed() == std::vector<std::int64_t>{1});
    // A root under a regular file cannot be created.
    const std::string file = (s.root / "a_file").string();
    std::ofstream(file) << "x";
    checkpoint_writer bad({.root = file + "/run"});
    shard_snapshot one("rank-0.bin");
    one.add<float>("w", {10}, 0, std::span<const float>(w));
    std::vector<shard_snapshot> mine;
    mine.push_back(std::move(one));
    CHECK_THROWS_WITH(bad.begin(base(1), std::move(mine)), Catch::Contains("cannot create the checkpoint directory"));
}
