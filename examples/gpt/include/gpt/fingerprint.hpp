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

} // namespace gpt
