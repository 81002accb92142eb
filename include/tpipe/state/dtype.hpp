#pragma once
// Element types a checkpoint stores, by name: the manifest records "f32" and the like so that a
// loader knows what the bytes are without the saver's code.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "tpipe/core/error.hpp"

namespace tpipe::state {

//! An element type with a checkpoint dtype name (stored as its native little-endian bytes).
template <class T>
concept stored_element = std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, std::int64_t> ||
                         std::is_same_v<T, std::uint64_t> || std::is_same_v<T, std::uint8_t>;

template <stored_element T>
constexpr const char* dtype_name()
{
    if constexpr (std::is_same_v<T, float>) return "f32";
    else if constexpr (std::is_same_v<T, double>) return "f64";
    else if constexpr (std::is_same_v<T, std::int64_t>) return "i64";
    else if constexpr (std::is_same_v<T, std::uint64_t>) return "u64";
    else return "u8";
}

//! Bytes of one element of a dtype name; throws tpipe::parse_error for an unknown name.
inline std::size_t dtype_bytes(const std::string& dtype)
{
    if (dtype == "f32") return 4;
    if (dtype == "f64" || dtype == "i64" || dtype == "u64") return 8;
    if (dtype == "u8") return 1;
    throw parse_error("unknown dtype \"" + dtype + "\"; known: f32, f64, i64, u64, u8");
}

} // namespace tpipe::state
