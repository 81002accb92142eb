#pragma once
// The checksum of checkpoint shards, fed in pieces, so that a shard is checked while it streams
// from disk. It detects truncation and flipped bits; it is not a defence against an adversary.
//
// - crc32c (format 2, what tpipe writes): CRC-32C (Castagnoli), the checksum of iSCSI, ext4,
//   LevelDB and TFRecord: it catches every burst error up to 32 bits and misses a random
//   corruption with probability 2^-32. x86 CPUs with SSE4.2 compute it with one instruction per
//   8 bytes (5.3 GB/s on the build machine); elsewhere tables do, 8 bytes a step.
// - fnv1a64 (format 1, still read): 64-bit FNV-1a, a multiply per byte (about 0.7 GB/s: it made
//   the checksum most of a save's CPU time).
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>

#include "tpipe/core/error.hpp"

namespace tpipe::state {

enum class checksum_kind { fnv1a64, crc32c };

namespace detail {

inline constexpr std::uint32_t crc32c_polynomial = 0x82F63B78u;  // reflected Castagnoli

// Slicing-by-8 tables: table[0] is the byte-at-a-time table, table[k] advances a byte k more.
inline constexpr std::array<std::array<std::uint32_t, 256>, 8> crc32c_tables = [] {
    std::array<std::array<std::uint32_t, 256>, 8> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? crc32c_polynomial : 0u);
        t[0][i] = c;
    }
    for (std::size_t k = 1; k < 8; ++k)
        for (std::size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFFu];
    return t;
}();

inline std::uint32_t crc32c_portable(std::uint32_t crc, const unsigned char* p, std::size_t n) noexcept
{
    const auto& t = crc32c_tables;
    if constexpr (std::endian::native == std::endian::little)
        for (; n >= 8; n -= 8, p += 8) {  // 8 bytes a step, by 8 table lookups
            std::uint32_t lo, hi;
            std::memcpy(&lo, p, 4);
            std::memcpy(&hi, p + 4, 4);
            lo ^= crc;
            crc = t[7][lo & 0xFFu] ^ t[6][(lo >> 8) & 0xFFu] ^ t[5][(lo >> 16) & 0xFFu] ^ t[4][lo >> 24] ^
                  t[3][hi & 0xFFu] ^ t[2][(hi >> 8) & 0xFFu] ^ t[1][(hi >> 16) & 0xFFu] ^ t[0][hi >> 24];
        }
    for (; n > 0; --n, ++p) crc = (crc >> 8) ^ t[0][(crc ^ *p) & 0xFFu];
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42(std::uint32_t crc, const unsigned char* p,
                                                                    std::size_t n) noexcept
{
    std::uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        std::uint64_t word;
        std::memcpy(&word, p, 8);  // x86 is little-endian: the bytes in order, as the table sees them
        c = __builtin_ia32_crc32di(c, word);
    }
    auto c32 = static_cast<std::uint32_t>(c);
    for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32;
}
inline bool have_sse42() noexcept
{
    static const bool yes = __builtin_cpu_supports("sse4.2");
    return yes;
}
#endif

//! CRC-32C of `n` bytes continued from the raw (pre-inverted) register `crc`; `hardware`: use the
//! SSE4.2 instruction where the CPU has it (false: the table, for tests).
inline std::uint32_t crc32c_update(std::uint32_t crc, const unsigned char* p, std::size_t n, bool hardware = true) noexcept
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (hardware && have_sse42()) return crc32c_sse42(crc, p, n);
#endif
    (void)hardware;
    return crc32c_portable(crc, p, n);
}

} // namespace detail

class checksum {
public:
    explicit checksum(checksum_kind k = checksum_kind::crc32c) noexcept
        : kind_(k), h_(k == checksum_kind::crc32c ? 0xFFFFFFFFull : fnv_basis)
    {
    }

    void update(std::span<const std::byte> bytes) noexcept
    {
        if (kind_ == checksum_kind::crc32c) {
            h_ = detail::crc32c_update(static_cast<std::uint32_t>(h_),
                                       reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
            return;
        }
        std::uint64_t h = h_;
        for (std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * fnv_prime;
        h_ = h;
    }
    std::uint64_t value() const noexcept { return kind_ == checksum_kind::crc32c ? (h_ ^ 0xFFFFFFFFull) : h_; }
    checksum_kind kind() const noexcept { return kind_; }
    //! Lower-case hex digits: 8 for crc32c, 16 for fnv1a64 (JSON numbers are doubles and cannot
    //! hold 64 bits).
    std::string hex() const { return to_hex(value(), digits(kind_)); }
    //! The name a message gives it, and its hex digits.
    static const char* name(checksum_kind k) { return k == checksum_kind::crc32c ? "CRC-32C" : "FNV-1a"; }
    static int digits(checksum_kind k) { return k == checksum_kind::crc32c ? 8 : 16; }

    //! `digits` lower-case hex digits of v (64-bit values such as RNG states: 16).
    static std::string to_hex(std::uint64_t v, int digits = 16)
    {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
        return buf;
    }
    //! Parses `digits` hex digits; throws tpipe::parse_error otherwise (`what` names the field).
    static std::uint64_t from_hex(const std::string& s, const std::string& what, int digits = 16)
    {
        if (s.size() != static_cast<std::size_t>(digits))
            throw parse_error(what + " must be " + std::to_string(digits) + " hex digits, got \"" + s + "\"");
        std::uint64_t v = 0;
        for (char c : s) {
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0)
                throw parse_error(what + " must be " + std::to_string(digits) + " lower-case hex digits, got \"" + s + "\"");
            v = (v << 4) | static_cast<std::uint64_t>(d);
        }
        return v;
    }

private:
    static constexpr std::uint64_t fnv_prime = 1099511628211ull;
    static constexpr std::uint64_t fnv_basis = 0xcbf29ce484222325ull;  // the FNV-1a 64-bit offset basis
    checksum_kind kind_;
    std::uint64_t h_;
};

} // namespace tpipe::state
