// The manifest cannot lie: its own checksum refuses an edit by hand, and every field is checked
// on read independently of the checksum (a tool could recompute it), naming the field.
#include <catch2/catch.hpp>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "scratch.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/state/checkpoint_reader.hpp"
#include "tpipe/state/checkpoint_writer.hpp"

using namespace tpipe::state;
using state_test::scratch;
namespace fs = std::filesystem;

namespace {

manifest base(std::int64_t step)
{
    manifest m;
    m.step = step;
    m.model = tpipe::json::object{{"layers", 2}};
    m.optimizer = tpipe::json::object{{"kind", "adamw"}, {"step_count", step}};
    return m;
}

//! rank-0.bin (56 bytes): "adamw.m/x" f32 [4] at 0, "adamw.v/x" f32 [4] at 16 (two tensors of one
//! shape), "w" f32 [2, 5] elements [0, 6) at 32. rank-1.bin (40 bytes): "w" [6, 10) at 0, "m" f64 [3] at 16.
std::vector<shard_snapshot> layout()
{
    const std::vector<float> m{1, 2, 3, 4}, v{10, 20, 30, 40}, w{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    shard_snapshot a("rank-0.bin"), b("rank-1.bin");
    a.add<float>("adamw.m/x", {4}, 0, m);
    a.add<float>("adamw.v/x", {4}, 0, v);
    a.add<float>("w", {2, 5}, 0, std::span<const float>(w).subspan(0, 6));
    b.add<float>("w", {2, 5}, 6, std::span<const float>(w).subspan(6));
    const std::vector<double> d{1.5, -2.0, 3.25};
    b.add<double>("m", {3}, 0, d);
    return {std::move(a), std::move(b)};
}

//! A committed checkpoint of step 2 and its manifest's text, to edit.
struct saved {
    scratch s;
    fs::path mpath;
    std::string text;
    explicit saved(const std::string& tag) : s(tag)
    {
        checkpoint_writer out({.root = s.run(), .shards = 2});
        out.begin(base(2), layout());
        out.finish();
        mpath = fs::path(checkpoint_directory(s.run()).committed_path(2)) / manifest_file;
        text = tpipe::read_file(mpath.string(), "manifest");
    }
    void write(const std::string& t) const { std::ofstream(mpath, std::ios::trunc | std::ios::binary) << t; }
    //! What opening the checkpoint says ("" when it loads).
    std::string refusal() const
    {
        try {
            checkpoint_reader in(s.run());
            return "";
        } catch (const corrupt_checkpoint& e) {
            return e.what();
        }
    }
};

//! `text` with its one occurrence of `from` replaced by `to`.
std::string edited(std::string text, const std::string& from, const std::string& to)
{
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    REQUIRE(text.find(from, at + 1) == std::string::npos);
    return text.replace(at, from.size(), to);
}

//! The manifest with its checksum recomputed, as a tool that knows the format would.
std::string resealed(const std::string& text)
{
    const std::string rest = text.substr(detail::manifest_sum_prefix);
    return std::string(detail::manifest_sum_key) + checksum::to_hex(detail::crc32c_of(rest), 8) + "\"," + rest;
}

const std::string checksum_failure = "fails its checksum";
const std::string range_m = R"({"begin":0,"dtype":"f32","end":4,"name":"adamw.m/x","offset":0,"shape":[4]})";
const std::string range_v = R"({"begin":0,"dtype":"f32","end":4,"name":"adamw.v/x","offset":16,"shape":[4]})";

} // namespace

TEST_CASE("the manifest carries a CRC-32C of its own text; the untouched one loads", "[state][manifest]")
{
    saved c("sealed");
    CHECK(c.text.rfind("{\"manifest_crc32c\":\"", 0) == 0);
    CHECK(c.refusal() == "");
    CHECK(resealed(c.text) == c.text);
    checkpoint_reader in(c.s.run());
    CHECK(in.contents().format == 3);
    std::vector<float> v(4);
    in.read<float>("adamw.v/x", 0, v);
    CHECK(v == std::vector<float>{10, 20, 30, 40});
}

TEST_CASE("every manifest edit of issue 37 is refused, naming the field or the checksum", "[state][manifest]")
{
    saved c("issue");
    SECTION("step -3, 2.5, 1e300: not an integer >= 0, checksum or not")
    {
        for (const std::string bad : {"-3", "2.5", "1e300"}) {
            for (bool tool : {false, true}) {
                const std::string t = edited(c.text, "\"step\":2,", "\"step\":" + bad + ",");
                c.write(tool ? resealed(t) : t);
                CAPTURE(bad, tool);
                CHECK_THAT(c.refusal(), Catch::Contains("is malformed: step must be an integer in 0..9007199254740991, got"));
            }
        }
    }
    SECTION("step 0, 5, 7: in range, so the checksum refuses it")
    {
        for (const std::string other : {"0", "5", "7"}) {
            c.write(edited(c.text, "\"step\":2,", "\"step\":" + other + ","));
            CHECK_THAT(c.refusal(), Catch::Contains(checksum_failure) && Catch::Contains("edited or corrupted"));
        }
    }
    SECTION("the optimizer's step_count 0 or 2.5: the checksum (train_gpt also checks it against step)")
    {
        for (const std::string other : {"0", "2.5"}) {
            c.write(edited(c.text, "\"step_count\":2", "\"step_count\":" + other));
            CHECK_THAT(c.refusal(), Catch::Contains(checksum_failure));
        }
    }
    SECTION("the offsets of two tensors of one shape swapped: the checksum")
    {
        std::string t = edited(c.text, range_m, edited(range_m, "\"offset\":0", "\"offset\":16"));
        t = edited(t, range_v, edited(range_v, "\"offset\":16", "\"offset\":0"));
        c.write(t);
        CHECK_THAT(c.refusal(), Catch::Contains(checksum_failure));
        // Resealed, the layout is consistent: only the checksum could tell (docs/checkpoint.md).
        c.write(resealed(t));
        CHECK(c.refusal() == "");
    }
    SECTION("an extra range that overlaps another: refused as an overlap, checksum or not")
    {
        const std::string extra = R"({"begin":0,"dtype":"f32","end":4,"name":"extra","offset":8,"shape":[4]},)";
        const std::string t = edited(c.text, range_m, extra + range_m);
        for (bool tool : {false, true}) {
            c.write(tool ? resealed(t) : t);
            CHECK_THAT(c.refusal(), Catch::Contains("shards[0].ranges[") && Catch::Contains("(\"extra\", bytes [8, 24)) overlaps") &&
                                        Catch::Contains("a byte of a shard belongs to one range"));
        }
    }
    SECTION("the RNG's data streams edited: the checksum")
    {
        // The trainer's sections are covered like the rest (train_gpt checks their form).
        saved r("rng");
        manifest m = base(2);
        m.rng = tpipe::json::object{{"data_streams", tpipe::json::array{"0000000000000001"}}};
        // The same run (a save directory holds one run's checkpoints), step 2 written again.
        checkpoint_writer out({.root = r.s.run(), .run = checkpoint_reader(r.s.run()).contents().run, .shards = 2});
        out.begin(m, layout());
        out.finish();
        const std::string t = tpipe::read_file(r.mpath.string(), "manifest");
        r.write(edited(t, "0000000000000001", "0000000000000002"));
        CHECK_THAT(r.refusal(), Catch::Contains(checksum_failure));
    }
}

TEST_CASE("one flipped bit in a digit of step, step_count or an offset is refused: every try", "[state][manifest]")
{
    saved c("bits");
    std::vector<std::size_t> digits;  // the positions of those digits in the text
    for (const std::string key : {"\"step\":", "\"step_count\":", "\"offset\":"})
        for (auto at = c.text.find(key); at != std::string::npos; at = c.text.find(key, at + 1))
            for (auto k = at + key.size(); k < c.text.size() && c.text[k] >= '0' && c.text[k] <= '9'; ++k) digits.push_back(k);
    int tries = 0, refused = 0;
    for (std::size_t at : digits)
        for (int bit = 0; bit < 7; ++bit) {
            std::string t = c.text;
            t[at] = static_cast<char>(t[at] ^ (1 << bit));
            c.write(t);
            ++tries;
            if (!c.refusal().empty()) ++refused;
        }
    CHECK(tries >= 28);
    CHECK(refused == tries);
}

TEST_CASE("manifest edits beyond the issue's are refused, naming the field", "[state][manifest]")
{
    saved c("more");
    struct edit {
        std::string from, to, says;
    };
    const std::vector<edit> edits = {
        // a shard's size: its ranges no longer fill it
        {"\"bytes\":56,", "\"bytes\":60,", "shards[0]: its ranges hold 56 bytes, but bytes is 60 (the rest is in no range)"},
        // a range past the end of its tensor
        {range_v, edited(range_v, "\"end\":4", "\"end\":5"), "shards[0].ranges[1]: elements [0, 5) do not fit tensor \"adamw.v/x\" of 4 elements"},
        // one tensor given another shape in one of its shards
        {R"("end":10,"name":"w","offset":0,"shape":[2,5])", R"("end":10,"name":"w","offset":0,"shape":[5,2])",
         "tensor \"w\" is f32 of shape [5,2] here and f32 of shape [2,5] in another range"},
        // a file outside the checkpoint directory
        {"\"file\":\"rank-1.bin\"", "\"file\":\"../rank-1.bin\"", "shards[1].file \"../rank-1.bin\" must be a plain name"},
        // a shard listed twice
        {"\"file\":\"rank-1.bin\"", "\"file\":\"rank-0.bin\"", "shards[1].file \"rank-0.bin\" is listed twice"},
        // a negative begin
        {range_m, edited(range_m, "\"begin\":0", "\"begin\":-1"), "shards[0].ranges[0].begin must be an integer in 0..9007199254740991, got '-1'"},
        // dimensions whose product overflows
        {range_m, edited(range_m, "\"shape\":[4]", "\"shape\":[4294967296,4294967296]"), "shards[0].ranges[0].shape"},
        // an offset as a string
        {range_v, edited(range_v, "\"offset\":16", "\"offset\":\"16\""), "shards[0].ranges[1].offset must be an integer in 0..9007199254740991, got \"16\""},
        // a shard checksum in capitals
        {"\"checksum_crc32c\":\"", "\"checksum_crc32c\":\"X", "shards[0].checksum_crc32c must be 8 hex digits"},
        // an unknown dtype
        {range_m, edited(range_m, "\"f32\"", "\"f16\""), "shards[0].ranges[0].dtype: unknown dtype \"f16\""},
        // not a checkpoint any more
        {"\"tpipe_checkpoint\":true", "\"tpipe_checkpoint\":false", "tpipe_checkpoint must be true"},
        // step missing
        {"\"step\":2,", "", "step is missing"},
    };
    for (const auto& e : edits)
        for (bool tool : {false, true}) {
            CAPTURE(e.from, e.to, tool);
            std::string t = c.text;
            const auto at = t.find(e.from);
            REQUIRE(at != std::string::npos);
            t.replace(at, e.from.size(), e.to);
            c.write(tool ? resealed(t) : t);
            CHECK_THAT(c.refusal(), Catch::Contains(e.says));
        }
    SECTION("a manifest rewritten by a JSON tool (no checksum first), or claiming format 2, is refused")
    {
        auto v = tpipe::json::parse(c.text);
        c.write(tpipe::json::dump(v));  // the keys in another order: the checksum no longer comes first
        CHECK_THAT(c.refusal(), Catch::Contains("does not start with its checksum"));
        c.write(edited(c.text, "\"format\":3", "\"format\":2"));
        CHECK_THAT(c.refusal(), Catch::Contains(checksum_failure));
    }
}

TEST_CASE("a tensor held by two shards is refused: by the writer before its commit, and by the reader",
          "[state][manifest]")
{
    scratch s("twice");
    const std::vector<float> w(10, 1.0f), other(10, 2.0f);
    shard_snapshot a("rank-0.bin"), b("rank-1.bin");
    a.add<float>("w", {10}, 0, w);
    b.add<float>("w", {10}, 4, std::span<const float>(other).subspan(0, 6));
    std::vector<shard_snapshot> both;
    both.push_back(std::move(a));
    both.push_back(std::move(b));
    checkpoint_writer out({.root = s.run(), .shards = 2});
    out.begin(base(1), std::move(both));
    CHECK_THROWS_AS(out.finish(), write_error);
    CHECK(checkpoint_directory(s.run()).committed().empty());

    // The same layout in a manifest (written by hand, resealed): the reader refuses it too.
    saved c("twice_read");
    // rank-1.bin's "w" moved from [6, 10) to [4, 8): the same bytes, elements 4 and 5 twice.
    const std::string held_twice = edited(c.text, R"({"begin":6,"dtype":"f32","end":10,"name":"w")",
                                          R"({"begin":4,"dtype":"f32","end":8,"name":"w")");
    c.write(resealed(held_twice));
    CHECK_THAT(c.refusal(), Catch::Contains("tensor \"w\": elements [4, 6) are held twice, by shards[0].ranges[2] and "
                                            "shards[1].ranges[0]"));
}

TEST_CASE("reads are bounds-checked without overflow; a negative step is not saved", "[state][manifest]")
{
    saved c("bounds");
    checkpoint_reader in(c.s.run());
    std::vector<float> out(8);
    CHECK_THROWS_AS(in.read<float>("w", INT64_MAX - 2, out), incompatible_checkpoint);
    CHECK_THROWS_WITH(in.read<float>("w", INT64_MAX - 2, out), Catch::Contains("lie outside tensor \"w\" of 10"));
    CHECK_THROWS_AS(in.read<float>("w", -1, out), incompatible_checkpoint);
    CHECK_THROWS_AS(in.read<float>("w", 3, out), incompatible_checkpoint);
    in.read<float>("w", 2, out);
    CHECK(out == std::vector<float>{2, 3, 4, 5, 6, 7, 8, 9});

    checkpoint_writer w({.root = (c.s.root / "other").string(), .shards = 2});
    for (std::int64_t bad : {std::int64_t{-1}, std::int64_t{1} << 53}) {
        CHECK_THROWS_AS(w.begin(base(bad), layout()), tpipe::invalid_argument);
        CHECK_THROWS_WITH(w.begin(base(bad), layout()), Catch::Contains("step " + std::to_string(bad) + " must be in 0.."));
    }
    named_range huge{"h", "f32", {INT64_MAX / 2, 4}, 0, 0, 0};
    CHECK_THROWS_AS(huge.elements(), tpipe::invalid_argument);
}

TEST_CASE("a writer destroyed with a save in progress says so on stderr and commits nothing", "[state][manifest]")
{
    scratch s("destroyed");
    const std::string log = (s.root / "stderr.txt").string();
    std::fflush(stderr);
    const int saved_fd = ::dup(2);
    std::FILE* f = std::fopen(log.c_str(), "w");
    REQUIRE(f);
    ::dup2(::fileno(f), 2);
    {
        checkpoint_writer out({.root = s.run(), .shards = 2});
        out.begin(base(4), layout());
    }
    std::fflush(stderr);
    ::dup2(saved_fd, 2);
    ::close(saved_fd);
    std::fclose(f);
    const std::string said = tpipe::read_file(log, "stderr");
    CHECK_THAT(said, Catch::Contains("checkpoint_writer destroyed with the save of step 4 in progress: not committed"));
    CHECK(checkpoint_directory(s.run()).committed().empty());
}
