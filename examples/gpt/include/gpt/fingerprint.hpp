#pragma once
// A fingerprint of weights, to compare runs bitwise across threads and processes.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gpt {

//! FNV-1a over the bytes of a float vector, as 16 hex digits.
inline std::string fnv_hex(const std::vector<float>& v)
{
    std::uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

} // namespace gpt
