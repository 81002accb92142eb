#pragma once
// floor(n * (a/q)^e) exactly, for the progressive freeze schedule: a long double estimate,
// confirmed with integer arithmetic whenever it lies close enough to an integer that rounding
// could have moved it across one.
#include <cmath>
#include <cstdint>
#include <vector>

namespace tpipe::detail {

//! Unsigned big integer, little-endian base 2^32: only what the exact test needs.
class big_uint {
public:
    explicit big_uint(std::uint64_t v)
    {
        while (v) {
            limbs_.push_back(static_cast<std::uint32_t>(v));
            v >>= 32;
        }
    }
    big_uint& operator*=(std::uint32_t m)
    {
        std::uint64_t carry = 0;
        for (auto& l : limbs_) {
            const std::uint64_t t = static_cast<std::uint64_t>(l) * m + carry;
            l = static_cast<std::uint32_t>(t);
            carry = t >> 32;
        }
        if (carry) limbs_.push_back(static_cast<std::uint32_t>(carry));
        if (m == 0) limbs_.clear();
        return *this;
    }
    friend bool operator<=(const big_uint& x, const big_uint& y)
    {
        if (x.limbs_.size() != y.limbs_.size()) return x.limbs_.size() < y.limbs_.size();
        for (std::size_t i = x.limbs_.size(); i-- > 0;)
            if (x.limbs_[i] != y.limbs_[i]) return x.limbs_[i] < y.limbs_[i];
        return true;
    }

private:
    std::vector<std::uint32_t> limbs_;  // no leading zero limbs
};

//! k * q^e <= n * a^e, exactly (a, q < 2^32).
inline bool scaled_power_at_least(std::int64_t k, std::int64_t n, std::int64_t a, std::int64_t q, std::int64_t e)
{
    big_uint lhs(static_cast<std::uint64_t>(k)), rhs(static_cast<std::uint64_t>(n));
    for (std::int64_t i = 0; i < e; ++i) {
        lhs *= static_cast<std::uint32_t>(q);
        rhs *= static_cast<std::uint32_t>(a);
    }
    return lhs <= rhs;
}

//! floor(n * (a/q)^e) for 0 <= a <= q, n >= 0, e >= 0.
inline std::int64_t floor_scaled_power(std::int64_t n, std::int64_t a, std::int64_t q, std::int64_t e)
{
    if (e == 0 || a == q) return n;
    if (a == 0 || n == 0) return 0;
    const long double x = static_cast<long double>(n) *
                          std::exp(static_cast<long double>(e) * std::log(static_cast<long double>(a) / q));
    const long double nearest = std::round(x);
    if (nearest < 0.5L || std::fabs(x - nearest) > 1e-6L * (nearest < 1 ? 1 : nearest))
        return static_cast<std::int64_t>(std::floor(x));
    // Close to the integer k = nearest: the answer is k if k q^e <= n a^e, else k - 1.
    const auto k = static_cast<std::int64_t>(nearest);
    return scaled_power_at_least(k, n, a, q, e) ? k : k - 1;
}

} // namespace tpipe::detail
