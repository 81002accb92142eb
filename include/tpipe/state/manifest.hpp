#pragma once
// The manifest of a checkpoint (manifest.json in its directory): what the checkpoint holds and
// how to check it. The layout is the list of named ranges of every shard; the trainer's own
// sections (model config, optimizer, RNG and sampler, elastic state) are JSON it fills and reads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tpipe/core/json.hpp"
#include "tpipe/state/checksum.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/manifest_field.hpp"
#include "tpipe/state/named_range.hpp"
#include "tpipe/state/run_id.hpp"

namespace tpipe::state {

//! Version of the on-disk format written: 3 (shards checked by CRC-32C, and the manifest by its
//! own CRC-32C). A loader also reads versions 2 (no manifest checksum) and 1 (shards checked by
//! FNV-1a 64), validating every field alike, and refuses any other.
inline constexpr int checkpoint_format_version = 3;
inline constexpr int oldest_readable_format_version = 1;
//! The file that makes a directory a checkpoint; written last, inside the temporary directory.
inline constexpr const char* manifest_file = "manifest.json";

//! One shard file: its size, checksum and the named ranges it holds.
struct shard_entry {
    std::string file;  //!< relative to the checkpoint directory
    std::int64_t bytes = 0;
    std::uint64_t checksum = 0;
    std::vector<named_range> ranges;
    checksum_kind kind = checksum_kind::crc32c;  //!< formats 2 and 3: crc32c; format 1: fnv1a64
};

//! The manifest key of a shard's checksum of kind k.
inline const char* checksum_key(checksum_kind k)
{
    return k == checksum_kind::crc32c ? "checksum_crc32c" : "checksum_fnv1a64";
}

//! One shard entry as JSON (the manifest's "shards" items, and a saver's per-shard record).
inline json::value shard_json(const shard_entry& s)
{
    json::array ranges;
    for (const auto& r : s.ranges) ranges.push_back(r.to_json());
    return json::object{{"file", s.file},
                        {"bytes", s.bytes},
                        {checksum_key(s.kind), checksum::to_hex(s.checksum, checksum::digits(s.kind))},
                        {"ranges", std::move(ranges)}};
}

//! Reads and checks one shard entry (`where` names it: "shards[1]"): a plain file name, integer
//! sizes, and ranges that tile the shard exactly, packed one after the other as shard_snapshot
//! writes them (every byte in one range: no overlap, no gap, none past the end). Throws
//! tpipe::error naming the field. `kind`: the checksum of the manifest's format.
inline shard_entry shard_from_json(const json::value& s, const std::string& where,
                                   checksum_kind kind = checksum_kind::crc32c)
{
    shard_entry e;
    e.kind = kind;
    e.file = field::text(s, where, "file");
    if (e.file.find('/') != std::string::npos || e.file[0] == '.' || e.file.find('\0') != std::string::npos)
        throw parse_error(field::path(where, "file") + " \"" + e.file + "\" must be a plain name inside the checkpoint");
    e.bytes = field::integer(s, where, "bytes");
    const std::string key = checksum_key(kind);
    const json::value& sum = field::member(s, where, key);
    if (!sum.is_string()) throw parse_error(field::path(where, key) + " must be a string of hex digits, got " + json::dump(sum));
    e.checksum = checksum::from_hex(sum.as_string(), field::path(where, key), checksum::digits(kind));
    const json::array& ranges = field::array(s, where, "ranges");
    for (std::size_t j = 0; j < ranges.size(); ++j)
        e.ranges.push_back(named_range::from_json(ranges[j], where + ".ranges[" + std::to_string(j) + "]"));
    // The ranges by offset (empty ones hold no byte) must cover [0, bytes) once each.
    std::vector<std::size_t> order;
    for (std::size_t j = 0; j < e.ranges.size(); ++j)
        if (e.ranges[j].end > e.ranges[j].begin) order.push_back(j);
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return e.ranges[a].offset < e.ranges[b].offset; });
    auto text = [&](std::size_t j) {
        const auto& r = e.ranges[j];
        return where + ".ranges[" + std::to_string(j) + "] (\"" + r.name + "\", bytes [" + std::to_string(r.offset) + ", " +
               std::to_string(r.offset + r.bytes()) + "))";
    };
    std::int64_t at = 0;  // offsets and sizes are below 2^53 and 2^56: no sum here overflows
    for (std::size_t k = 0; k < order.size(); ++k) {
        const auto& r = e.ranges[order[k]];
        if (r.offset < at)
            throw parse_error(text(order[k]) + " overlaps " + text(order[k - 1]) + ": a byte of a shard belongs to one range");
        if (r.offset > at)
            throw parse_error(where + ": bytes [" + std::to_string(at) + ", " + std::to_string(r.offset) + ") of \"" + e.file +
                              "\" are in no range (a shard is its ranges, packed one after the other)");
        at = r.offset + r.bytes();
    }
    for (const auto& r : e.ranges)
        if (r.end == r.begin && r.offset > e.bytes)
            throw parse_error(where + ": an empty range of \"" + r.name + "\" at offset " + std::to_string(r.offset) +
                              " lies past the shard's " + std::to_string(e.bytes) + " bytes");
    if (at != e.bytes)
        throw parse_error(where + ": its ranges hold " + std::to_string(at) + " bytes, but bytes is " + std::to_string(e.bytes) +
                          (at > e.bytes ? " (a range lies past the end of the shard)" : " (the rest is in no range)"));
    return e;
}

//! Checks the layout across shards: each file once; each tensor of one dtype and shape
//! everywhere, and each of its elements held by one range only (two shards holding a tensor's
//! element may disagree, and which one a load read would be arbitrary). Throws tpipe::error.
inline void check_layout(const std::vector<shard_entry>& shards)
{
    struct held {
        std::int64_t begin, end;
        std::string where;
    };
    std::map<std::string, std::pair<const named_range*, std::vector<held>>> tensors;
    for (std::size_t k = 0; k < shards.size(); ++k) {
        const std::string where = "shards[" + std::to_string(k) + "]";
        for (std::size_t i = 0; i < k; ++i)
            if (shards[i].file == shards[k].file)
                throw parse_error(where + ".file \"" + shards[k].file + "\" is listed twice (also shards[" + std::to_string(i) + "])");
        for (std::size_t j = 0; j < shards[k].ranges.size(); ++j) {
            const named_range& r = shards[k].ranges[j];
            auto& t = tensors[r.name];
            const std::string at = where + ".ranges[" + std::to_string(j) + "]";
            if (!t.first) t.first = &r;
            else if (!r.same_tensor(*t.first))
                throw parse_error(at + ": tensor \"" + r.name + "\" is " + r.dtype + " of shape " + json::dump(r.to_json().at("shape")) +
                                  " here and " + t.first->dtype + " of shape " + json::dump(t.first->to_json().at("shape")) +
                                  " in another range: one tensor has one dtype and shape");
            if (r.end > r.begin) t.second.push_back({r.begin, r.end, at});
        }
    }
    for (auto& [name, t] : tensors) {
        auto& v = t.second;
        std::sort(v.begin(), v.end(), [](const held& a, const held& b) { return a.begin < b.begin; });
        for (std::size_t k = 1; k < v.size(); ++k)
            if (v[k].begin < v[k - 1].end)
                throw parse_error("tensor \"" + name + "\": elements [" + std::to_string(v[k].begin) + ", " +
                                  std::to_string(std::min(v[k].end, v[k - 1].end)) + ") are held twice, by " + v[k - 1].where +
                                  " and " + v[k].where + " (a checkpoint holds each element once)");
    }
}

namespace detail {
//! A format-3 manifest starts with its checksum: {"manifest_crc32c":"XXXXXXXX", and the
//! CRC-32C covers every byte after that prefix, to the end of the file.
inline constexpr std::string_view manifest_sum_key = "{\"manifest_crc32c\":\"";
inline constexpr std::size_t manifest_sum_prefix = manifest_sum_key.size() + 8 + 2;  // key, 8 digits, ",

inline std::uint64_t crc32c_of(std::string_view text)
{
    checksum sum;
    sum.update(std::as_bytes(std::span<const char>(text.data(), text.size())));
    return sum.value();
}
} // namespace detail

struct manifest {
    int format = checkpoint_format_version;
    std::int64_t step = 0;             //!< optimizer steps taken (0 .. 2^53 - 1)
    std::string run;                   //!< the run's identity (16 hex digits; "" before run ids)
    json::value model;                 //!< the model's configuration (a loader compares it)
    json::value optimizer;             //!< kind, hyper-parameters, step count; its state is in ranges
    json::value rng;                   //!< RNG states and the data sampler's position
    json::value elastic;               //!< the elastic trainer's state (null when not elastic)
    json::value shape;                 //!< how the saver ran (stages, replicas, cuts): informative
    std::vector<shard_entry> shards;

    //! The manifest's fields, without its checksum. A field added here is read (and checked) in
    //! parse() below.
    json::value to_json() const
    {
        json::array files;
        for (const auto& s : shards) files.push_back(shard_json(s));
        json::object out{{"tpipe_checkpoint", true}, {"format", format},       {"step", step},
                         {"model", model},           {"optimizer", optimizer}, {"rng", rng},
                         {"elastic", elastic},       {"shape", shape},         {"shards", std::move(files)}};
        if (!run.empty()) out["run"] = run;
        return out;
    }

    //! The text of manifest.json: to_json() in format 3, its CRC-32C first.
    std::string text() const
    {
        manifest m = *this;
        m.format = checkpoint_format_version;
        for (auto& s : m.shards) s.kind = checksum_kind::crc32c;
        const std::string body = json::dump(m.to_json()) + "\n";  // "{...}\n"
        const std::string rest = body.substr(1);
        return std::string(detail::manifest_sum_key) + checksum::to_hex(detail::crc32c_of(rest), 8) + "\"," + rest;
    }

    //! Reads manifest text; `path` names the file in every refusal. A format version this tpipe
    //! does not read is an incompatible_checkpoint; anything malformed (a field that is not what
    //! it must be, ranges that overlap or leave gaps, a tensor held twice) or a format-3 manifest
    //! that fails its checksum is a corrupt_checkpoint naming the field.
    static manifest parse(const std::string& text, const std::string& path)
    {
        json::value v;
        try {
            v = json::parse(text);
        } catch (const error& e) {
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" is not valid JSON (truncated or damaged?): " +
                                     e.what());
        }
        if (!v.contains("tpipe_checkpoint"))
            throw corrupt_checkpoint("\"" + path + "\" is not a tpipe checkpoint manifest (no \"tpipe_checkpoint\" key)");
        if (!v.contains("format"))
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" is malformed: format is missing");
        const json::value& f = v.at("format");
        if (!f.is_number() || !(f.as_number() >= oldest_readable_format_version && f.as_number() <= checkpoint_format_version) ||
            f.as_number() != static_cast<int>(f.as_number()))
            throw incompatible_checkpoint("checkpoint \"" + path + "\" has format version " + json::dump(f) +
                                          "; this tpipe reads versions " + std::to_string(oldest_readable_format_version) +
                                          " to " + std::to_string(checkpoint_format_version));
        manifest m;
        try {
            if (!v.at("tpipe_checkpoint").as_bool("tpipe_checkpoint"))
                throw parse_error("tpipe_checkpoint must be true");
            m.format = static_cast<int>(f.as_number());
            const checksum_kind kind = m.format == 1 ? checksum_kind::fnv1a64 : checksum_kind::crc32c;
            m.step = field::integer(v, "", "step");
            if (v.contains("run")) m.run = run_id(field::text(v, "", "run"), "run");
            m.model = field::member(v, "", "model");
            m.optimizer = field::member(v, "", "optimizer");
            m.rng = field::member(v, "", "rng");
            m.elastic = field::member(v, "", "elastic");
            m.shape = field::member(v, "", "shape");
            const json::array& shards = field::array(v, "", "shards");
            for (std::size_t k = 0; k < shards.size(); ++k)
                m.shards.push_back(shard_from_json(shards[k], "shards[" + std::to_string(k) + "]", kind));
            check_layout(m.shards);
        } catch (const error& e) {
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" is malformed: " + e.what());
        }
        // A format-2 claim does not skip the checksum of a manifest that has one (an edit of
        // "format" alone is caught too).
        if (m.format >= 3 || v.contains("manifest_crc32c")) check_sum(text, path);
        return m;
    }

private:
    //! Format 3: the checksum the file starts with matches the rest of it.
    static void check_sum(std::string_view text, const std::string& path)
    {
        const std::string_view key = detail::manifest_sum_key;
        const std::size_t n = detail::manifest_sum_prefix;
        if (text.size() < n || text.substr(0, key.size()) != key || text.substr(n - 2, 2) != "\",")
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" does not start with its checksum " +
                                     "({\"manifest_crc32c\":\"<8 hex digits>\",): it was edited or rewritten after the save");
        const std::string recorded(text.substr(key.size(), 8));
        const std::string actual = checksum::to_hex(detail::crc32c_of(text.substr(n)), 8);
        if (recorded != actual)
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" fails its checksum (CRC-32C " + actual +
                                     ", it records " + recorded + "): it was edited or corrupted after the save");
    }
};

} // namespace tpipe::state
