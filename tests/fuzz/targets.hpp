#pragma once
// The fuzz targets: each takes arbitrary bytes, feeds them to one parser of tpipe, and checks
// the property that must hold for every input. A refusal is a tpipe::error (fine); any other
// exception escapes, and a crash, a sanitizer report or a failed property aborts. libFuzzer
// drives them from tests/fuzz/fuzz_main.cpp (tools/fuzz.sh); the regular build replays the
// corpus in tests/fuzz/corpus/<target>/ through them (tests/fuzz/test_corpus.cpp).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "../../tools/tpipe-plan/sim_options.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/plan/latency_json.hpp"
#include "tpipe/schedule/action.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/state/manifest.hpp"

namespace tpipe::fuzz {

//! A property that failed: abort, so that libFuzzer keeps the input and a replay fails loudly.
inline void require(bool ok, const char* what)
{
    if (!ok) {
        std::fprintf(stderr, "fuzz property failed: %s\n", what);
        std::abort();
    }
}

//! Action strings: what parses prints back to the same actions.
inline void action_text(std::string_view text)
{
    try {
        const auto actions = parse_cell(text);
        for (const action& a : actions)
            if (a.kind != op::OVERLAP_F_B) require(parse_action(to_string(a)) == a, "parse_action(to_string(a)) == a");
    } catch (const error&) {
    }
}

//! CSV programs: what parses is checked without throwing anything but tpipe::error, and writes
//! back to CSV that parses to the same program.
inline void csv_program(std::string_view text)
{
    try {
        const program p = from_csv(text);
        (void)check(p);
        require(from_csv(to_csv(p)) == p, "from_csv(to_csv(p)) == p");
    } catch (const error&) {
    }
}

//! JSON: what parses dumps to JSON that parses to the same value (dump is a fixed point).
inline void json_text(std::string_view text)
{
    try {
        const json::value v = json::parse(text);
        const std::string once = json::dump(v);
        require(json::dump(json::parse(once)) == once, "dump(parse(dump(v))) == dump(v)");
    } catch (const error&) {
    }
}

//! Latency-model JSON: a model that loads prices a unit with a number (or +inf), never NaN.
inline void latency_model(std::string_view text)
{
    if (text.empty()) return;
    try {
        const int stages = 1 + static_cast<unsigned char>(text.front()) % 8;  // first byte: the pipeline depth
        const any_latency m = latency_from_json(json::parse(text.substr(1)), latency_context{stages});
        const double t = m.seconds(1, 1, 0);
        require(!(t != t), "seconds(1, 1, 0) is not NaN");
    } catch (const error&) {
    }
}

//! tpipe-plan's flag parsing (the schedule, pipeline and cost options of simulate, compare and
//! run), words separated by NUL or newline bytes: refusals are tpipe::error, and what is read is
//! in range.
inline void cli_arguments(std::string_view text)
{
    std::vector<std::string> words(1);
    for (char c : text) {
        if (c == '\0' || c == '\n') words.emplace_back();
        else words.back() += c;
    }
    try {
        flag_reader a(words);
        const auto o = cli::read_pipeline(a, !words.empty() && words.front() != "--no-schedule");
        const auto c = cli::read_costs(a, o);
        a.finish();
        require(o.ranks >= 1 && o.microbatches >= 1 && o.slices >= 1 && o.virtual_stages >= 1, "sizes >= 1");
        require(c.f >= 0 && c.b >= 0 && c.w >= 0 && c.comm >= 0 && c.f + c.b + c.w <= 4e100, "finite costs >= 0");
    } catch (const error&) {
    }
}

//! Checkpoint manifests, fed twice: as they are (the checksum refuses almost every input) and
//! sealed with their CRC-32C first (so the field checks behind it are reached). A refusal is a
//! tpipe::error; what is accepted has every range inside its shard and tensor, and writes back
//! to a manifest that reads to the same one.
inline void checkpoint_manifest(std::string_view text)
{
    auto one = [](const std::string& t) {
        try {
            const state::manifest m = state::manifest::parse(t, "fuzz");
            for (const auto& s : m.shards)
                for (const auto& r : s.ranges) {
                    require(0 <= r.begin && r.begin <= r.end && r.end <= r.elements(), "range inside its tensor");
                    require(0 <= r.offset && r.offset + r.bytes() <= s.bytes, "range inside its shard");
                }
            if (m.format >= 2) {  // format 1's shard checksums are another kind: not written back as such
                const state::manifest back = state::manifest::parse(m.text(), "fuzz");
                require(json::dump(back.to_json()) == json::dump([&] {
                            state::manifest f = m;
                            f.format = state::checkpoint_format_version;
                            return f.to_json();
                        }()),
                        "parse(m.text()) == m");
            }
        } catch (const error&) {
        }
    };
    one(std::string(text));
    if (!text.empty() && text.front() == '{') {
        const std::string rest(text.substr(1));
        one(std::string(state::detail::manifest_sum_key) + state::checksum::to_hex(state::detail::crc32c_of(rest), 8) + "\"," +
            rest);
    }
}

struct target {
    const char* name;
    void (*run)(std::string_view);
};

inline constexpr target targets[] = {{"action", action_text},
                                     {"csv", csv_program},
                                     {"json", json_text},
                                     {"latency_json", latency_model},
                                     {"cli", cli_arguments},
                                     {"manifest", checkpoint_manifest}};

} // namespace tpipe::fuzz
