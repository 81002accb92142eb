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

TEST_CASE("the shard checksum is CRC-32C (formats 2 and 3), fed in pieces; FNV-1a 64 (format 1) still computes", "[state]")
{
    auto bytes = [](const std::string& t) { return std::as_bytes(std::span<const char>(t)); };
    checksum crc;
    CHECK(crc.hex() == "00000000");
    crc.update(bytes("123456789"));
    CHECK(crc.hex() == "e3069283");  // the CRC-32C check value (RFC 3720)
    checksum fnv(checksum_kind::fnv1a64);
    CHECK(fnv.hex() == "cbf29ce484222325");
    fnv.update(bytes("a"));
    CHECK(fnv.hex() == "af63dc4c8601ec8c");
    // Any split, and the SSE4.2 instruction equals the table, for every length and alignment.
    std::vector<unsigned char> data(4099);
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 131 + (i >> 3));
    for (std::size_t start : {0u, 1u, 3u, 7u})
        for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 64u, 4000u}) {
            CAPTURE(start, n);
            CHECK(tpipe::state::detail::crc32c_update(~0u, data.data() + start, n, true) ==
                  tpipe::state::detail::crc32c_update(~0u, data.data() + start, n, false));
        }
    for (checksum_kind k : {checksum_kind::crc32c, checksum_kind::fnv1a64}) {
        const std::string all = "checkpoint shards, fed in pieces";
        checksum whole(k), pieces(k);
        whole.update(bytes(all));
        pieces.update(bytes(all).subspan(0, 5));
        pieces.update(bytes(all).subspan(5));
        CHECK(whole.value() == pieces.value());
        CHECK(checksum::from_hex(whole.hex(), "x", checksum::digits(k)) == whole.value());
    }
    CHECK_THROWS_AS(checksum::from_hex("12", "x"), tpipe::parse_error);
}

TEST_CASE("a format-1 checkpoint (FNV-1a checksums) still loads; a damaged one is still refused", "[state]")
{
    scratch s("format1");
    const auto w = iota_floats(10, 0.5f);
    save(s.run(), 3, w);
    const std::string dir = checkpoint_directory(s.run()).committed_path(3);
    const fs::path mpath = fs::path(dir) / manifest_file;
    auto v = tpipe::json::parse(tpipe::read_file(mpath.string(), "manifest")).as_object();
    CHECK(v.at("format").as_number("format") == 3);
    // Rewrite it as version 1 wrote it: FNV-1a of each shard under "checksum_fnv1a64".
    v["format"] = 1;
    v.erase("manifest_crc32c");  // format 3's
    tpipe::json::array shards;
    for (const auto& sh : v.at("shards").as_array("shards")) {
        auto e = sh.as_object();
        const std::string body = tpipe::read_file(dir + "/" + e.at("file").as_string("file"), "shard");
        checksum fnv(checksum_kind::fnv1a64);
        fnv.update(std::as_bytes(std::span<const char>(body)));
        e.erase("checksum_crc32c");
        e["checksum_fnv1a64"] = fnv.hex();
        shards.push_back(tpipe::json::value(e));
    }
    v["shards"] = shards;
    std::ofstream(mpath, std::ios::trunc) << tpipe::json::dump(tpipe::json::value(v));
    {
        checkpoint_reader in(s.run());
        CHECK(in.contents().format == 1);
        std::vector<float> back(10);
        in.read_tensor<float>("w", {2, 5}, back);
        CHECK(back == w);
    }
    overwrite_byte(fs::path(dir) / "rank-0.bin", 2);
    CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("fails its checksum (FNV-1a"));
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
        CHECK_THROWS_WITH(checkpoint_reader(s.run()), Catch::Contains("has format version 99; this tpipe reads versions 1 to 3"));
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
