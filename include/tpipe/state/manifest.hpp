#pragma once
// The manifest of a checkpoint (manifest.json in its directory): what the checkpoint holds and
// how to check it. The layout is the list of named ranges of every shard; the trainer's own
// sections (model config, optimizer, RNG and sampler, elastic state) are JSON it fills and reads.
#include <cstdint>
#include <string>
#include <vector>

#include "tpipe/core/json.hpp"
#include "tpipe/state/checksum.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/named_range.hpp"
#include "tpipe/state/run_id.hpp"

namespace tpipe::state {

//! Version of the on-disk format written: 2 (shards checked by CRC-32C). A loader also reads
//! version 1 (FNV-1a 64) and refuses any other.
inline constexpr int checkpoint_format_version = 2;
inline constexpr int oldest_readable_format_version = 1;
//! The file that makes a directory a checkpoint; written last, inside the temporary directory.
inline constexpr const char* manifest_file = "manifest.json";

//! One shard file: its size, checksum and the named ranges it holds.
struct shard_entry {
    std::string file;  //!< relative to the checkpoint directory
    std::int64_t bytes = 0;
    std::uint64_t checksum = 0;
    std::vector<named_range> ranges;
    checksum_kind kind = checksum_kind::crc32c;  //!< format 2: crc32c; format 1: fnv1a64
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

//! Throws tpipe::parse_error for a malformed entry (`where` names it). `kind`: the checksum of
//! the manifest's format.
inline shard_entry shard_from_json(const json::value& s, const std::string& where,
                                   checksum_kind kind = checksum_kind::crc32c)
{
    shard_entry e;
    e.kind = kind;
    e.file = s.at("file").as_string("file");
    if (e.file.empty() || e.file.find('/') != std::string::npos || e.file[0] == '.')
        throw parse_error(where + ": file \"" + e.file + "\" must be a plain name inside the checkpoint");
    const double bytes = s.at("bytes").as_number("bytes");
    if (!(bytes >= 0 && bytes < 9.0e15)) throw parse_error(where + ": bytes must be a non-negative integer");
    e.bytes = static_cast<std::int64_t>(bytes);
    e.checksum = checksum::from_hex(s.at(checksum_key(kind)).as_string("checksum"), where + " checksum",
                                    checksum::digits(kind));
    int j = 0;
    for (const auto& r : s.at("ranges").as_array("ranges")) {
        e.ranges.push_back(named_range::from_json(r, where + ".ranges[" + std::to_string(j++) + "]"));
        if (e.ranges.back().offset + e.ranges.back().bytes() > e.bytes)
            throw parse_error(where + ": range \"" + e.ranges.back().name + "\" lies past the shard's " +
                              std::to_string(e.bytes) + " bytes");
    }
    return e;
}

struct manifest {
    int format = checkpoint_format_version;
    std::int64_t step = 0;             //!< optimizer steps taken
    std::string run;                   //!< the run's identity (16 hex digits; "" before run ids)
    json::value model;                 //!< the model's configuration (a loader compares it)
    json::value optimizer;             //!< kind, hyper-parameters, step count; its state is in ranges
    json::value rng;                   //!< RNG states and the data sampler's position
    json::value elastic;               //!< the elastic trainer's state (null when not elastic)
    json::value shape;                 //!< how the saver ran (stages, replicas, cuts): informative
    std::vector<shard_entry> shards;

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

    //! Reads manifest text; `path` names the file in every refusal. A wrong format version is an
    //! incompatible_checkpoint, anything malformed a corrupt_checkpoint.
    static manifest parse(const std::string& text, const std::string& path)
    {
        json::value v;
        try {
            v = json::parse(text);
        } catch (const error& e) {
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" is not valid JSON (truncated or damaged?): " +
                                     e.what());
        }
        manifest m;
        try {
            if (!v.contains("tpipe_checkpoint"))
                throw corrupt_checkpoint("\"" + path + "\" is not a tpipe checkpoint manifest (no \"tpipe_checkpoint\" key)");
            const double f = v.at("format").as_number("format");
            if (f != 1 && f != 2)  // oldest_readable_format_version .. checkpoint_format_version
                throw incompatible_checkpoint("checkpoint \"" + path + "\" has format version " + json::dump(v.at("format")) +
                                              "; this tpipe reads versions " + std::to_string(oldest_readable_format_version) +
                                              " to " + std::to_string(checkpoint_format_version));
            m.format = static_cast<int>(f);
            const checksum_kind kind = m.format == 1 ? checksum_kind::fnv1a64 : checksum_kind::crc32c;
            m.step = static_cast<std::int64_t>(v.at("step").as_number("step"));
            if (v.contains("run")) m.run = run_id(v.at("run").as_string("run"), "run");
            m.model = v.at("model");
            m.optimizer = v.at("optimizer");
            m.rng = v.at("rng");
            m.elastic = v.at("elastic");
            m.shape = v.at("shape");
            int k = 0;
            for (const auto& s : v.at("shards").as_array("shards")) {
                auto e = shard_from_json(s, "shards[" + std::to_string(k++) + "]", kind);
                m.shards.push_back(std::move(e));
            }
        } catch (const checkpoint_error&) {
            throw;
        } catch (const error& e) {
            throw corrupt_checkpoint("checkpoint manifest \"" + path + "\" is malformed: " + e.what());
        }
        return m;
    }
};

} // namespace tpipe::state
