#pragma once
// Reading the fields of a checkpoint manifest: each value is checked for what it must be (an
// integer in a range, not 2.5 or 1e300; 16 hex digits; a non-empty string) before it is used,
// and a refusal names the field by its path in the manifest ("shards[1].ranges[3].offset"), so
// that an edited or damaged manifest says where. Refusals are tpipe::error (parse_error or, from
// tpipe::checked_integer, invalid_argument); manifest::parse turns them into corrupt_checkpoint.
//
//   const auto n = field::integer(m.optimizer, "optimizer", "step_count");   // 0 .. 2^53 - 1
#include <cstdint>
#include <string>

#include "tpipe/core/checked.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/state/checksum.hpp"

namespace tpipe::state::field {

//! The largest integer a manifest holds: 2^53 - 1 (JSON numbers are doubles, which skip integers
//! past it).
inline constexpr std::int64_t max_integer = (std::int64_t{1} << 53) - 1;

//! "optimizer.step_count", "shards[0].file", or `key` alone at the top level.
inline std::string path(const std::string& where, const std::string& key) { return where.empty() ? key : where + "." + key; }

//! Member `key` of the object `obj` (found at `where`).
inline const json::value& member(const json::value& obj, const std::string& where, const std::string& key)
{
    if (!obj.is_object()) throw parse_error((where.empty() ? "the manifest" : where) + " must be an object, got " + json::dump(obj));
    const auto& o = obj.as_object();
    const auto it = o.find(key);
    if (it == o.end()) throw parse_error(path(where, key) + " is missing");
    return it->second;
}

//! `v` (the field `name`) as an integer in [lo, hi].
inline std::int64_t integer_value(const json::value& v, const std::string& name, std::int64_t lo = 0,
                                  std::int64_t hi = max_integer)
{
    if (!v.is_number())
        throw parse_error(name + " must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " +
                          json::dump(v));
    return checked_integer<std::int64_t>(name, v.as_number(), lo, hi);
}

//! Member `key` of `obj` as an integer in [lo, hi] (default: 0 .. 2^53 - 1).
inline std::int64_t integer(const json::value& obj, const std::string& where, const std::string& key,
                            std::int64_t lo = 0, std::int64_t hi = max_integer)
{
    return integer_value(member(obj, where, key), path(where, key), lo, hi);
}

//! Member `key` of `obj` as a non-empty string.
inline const std::string& text(const json::value& obj, const std::string& where, const std::string& key)
{
    const json::value& v = member(obj, where, key);
    if (!v.is_string() || v.as_string().empty())
        throw parse_error(path(where, key) + " must be a non-empty string, got " + json::dump(v));
    return v.as_string();
}

//! `v` (the field `name`) as a 64-bit value written as 16 lower-case hex digits (an RNG state).
inline std::uint64_t hex64_value(const json::value& v, const std::string& name)
{
    if (!v.is_string()) throw parse_error(name + " must be 16 hex digits, got " + json::dump(v));
    return checksum::from_hex(v.as_string(), name, 16);
}

//! Member `key` of `obj` as an array.
inline const json::array& array(const json::value& obj, const std::string& where, const std::string& key)
{
    const json::value& v = member(obj, where, key);
    if (!v.is_array()) throw parse_error(path(where, key) + " must be an array, got " + json::dump(v));
    return v.as_array();
}

} // namespace tpipe::state::field
