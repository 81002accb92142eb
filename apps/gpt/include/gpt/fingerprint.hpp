#pragma once
// A fingerprint of weights, to compare runs bitwise across threads and processes.
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace gpt {

inline constexpr std::uint64_t fnv_offset_basis = 1469598103934665603ull;

//! FNV-1a continued over the bytes of `v` from the state `h` (hashing the pieces of a vector in
//! order gives the whole vector's hash: stage-local weights are fingerprinted piece by piece).
inline std::uint64_t fnv_update(std::uint64_t h, std::span<const float> v)
{
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

//! A hash state as 16 hex digits.
inline std::string fnv_hex(std::uint64_t h)
{
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

//! FNV-1a over the bytes of a float vector, as 16 hex digits.
inline std::string fnv_hex(const std::vector<float>& v) { return fnv_hex(fnv_update(fnv_offset_basis, v)); }

//! fnv_hex of a vector of `total` floats that `piece(first, count)` returns a piece at a time, so
//! that the whole vector never exists at once (a tensor-parallel model's shares put together).
template <class Piece>
std::string fnv_hex_by_pieces(std::int64_t total, Piece&& piece, std::int64_t size = std::int64_t(1) << 18)
{
    std::uint64_t h = fnv_offset_basis;
    for (std::int64_t at = 0; at < total; at += size) {
        const std::vector<float> v = piece(at, total - at < size ? total - at : size);
        h = fnv_update(h, std::span<const float>(v));
    }
    return fnv_hex(h);
}

} // namespace gpt
