#pragma once
// The 64-bit checksum of checkpoint shards: FNV-1a over the bytes, fed in pieces, so that a
// shard is checked while it streams from disk. It detects truncation and flipped bits; it is
// not a defence against an adversary.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>

#include "tpipe/core/error.hpp"

namespace tpipe::state {

class checksum {
public:
    void update(std::span<const std::byte> bytes) noexcept
    {
        std::uint64_t h = h_;
        for (std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * prime;
        h_ = h;
    }
    std::uint64_t value() const noexcept { return h_; }
    //! 16 lower-case hex digits (JSON numbers are doubles and cannot hold 64 bits).
    std::string hex() const { return to_hex(h_); }

    static std::string to_hex(std::uint64_t v)
    {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
        return buf;
    }
    //! Parses 16 hex digits; throws tpipe::parse_error otherwise (`what` names the field).
    static std::uint64_t from_hex(const std::string& s, const std::string& what)
    {
        if (s.size() != 16) throw parse_error(what + " must be 16 hex digits, got \"" + s + "\"");
        std::uint64_t v = 0;
        for (char c : s) {
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) throw parse_error(what + " must be 16 lower-case hex digits, got \"" + s + "\"");
            v = (v << 4) | static_cast<std::uint64_t>(d);
        }
        return v;
    }

private:
    static constexpr std::uint64_t prime = 1099511628211ull;
    std::uint64_t h_ = 0xcbf29ce484222325ull;  // the FNV-1a 64-bit offset basis
};

} // namespace tpipe::state
