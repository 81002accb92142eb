#pragma once
// tpipe::exact_square_sum<T>: the sum of squares of floats (or doubles), kept exactly and rounded
// once, so a gradient norm has the same bits however its elements are split and ordered: over
// pipeline stages, over the shards of a sharded (ZeRO-1) optimizer, over threads or processes.
//
//   tpipe::exact_square_sum<float> s;
//   s.add(my_gradient_shard);                           // any pieces, in any order
//   co_await replicas.all_reduce_sum(s.digits());       // an integer sum: exact in any order
//   const double norm = std::sqrt(s.value());           // the correctly rounded sum, then sqrt
//
// Why exact: a float's square is exact in double, but adding squares in double rounds, and the
// rounding depends on the order. A sharded optimizer adds its shard, then the shards' sums: a
// double fold would give other bits than a replicated optimizer's one pass over the buffer, and
// the clip would then drift. Here each square m^2 * 2^(2e) (m the integer significand) is added
// to integer digits of its exponent's bin: 24-bit digits in int64, so 2^39 squares fit before
// a digit can overflow. value() adds the bins into one wide integer and rounds it to the nearest
// double (ties to even) once. Infinities and NaNs are counted: value() is then +inf or NaN.
//
// Cost: one multiply and a few integer adds per element: 1.4 ns per float on the 2-core build
// machine, 2.7x the double fold in eight lanes it replaced (bench/bench_state.cpp BM_square_sum;
// about 80 ms a step for 57 M parameters, divided by D when sharded). The state is 4 KiB for
// float, 80 KiB for double; value() walks it once.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

namespace tpipe {

namespace detail {
__extension__ typedef unsigned __int128 uint128;  // GCC and Clang; a double's significand squared needs 106 bits
}

template <class T>
    requires(std::same_as<T, float> || std::same_as<T, double>) && std::numeric_limits<T>::is_iec559
class exact_square_sum {
    using bits_t = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
    using square_t = std::conditional_t<sizeof(T) == 4, std::uint64_t, detail::uint128>;
    static constexpr int mantissa_bits = std::numeric_limits<T>::digits - 1;  // stored: 23 or 52
    static constexpr int bins = 1 << (8 * sizeof(T) - 1 - mantissa_bits);     // exponents: 256 or 2048
    static constexpr int digit_bits = 24;
    static constexpr int digits_per_bin = (2 * (mantissa_bits + 1) + digit_bits - 1) / digit_bits;  // 2 or 5
    static constexpr int special = bins - 1;  // the exponent of inf and NaN: its digit 0 counts infs, 1 NaNs
    // The wide integer value() builds: bit 0 is the smallest square's unit, 2^(2 - 2 bias - 2 mantissa_bits).
    static constexpr int wide_bits = 2 * (bins - 3) + digit_bits * (digits_per_bin - 1) + 64 + 64;
    static constexpr int limbs = wide_bits / 64 + 1;
    static constexpr int unit_exponent = 2 - 2 * (std::numeric_limits<T>::max_exponent - 1) - 2 * mantissa_bits;

public:
    //! The number of int64 digits: what digits() spans.
    static constexpr std::size_t size = static_cast<std::size_t>(bins) * digits_per_bin;

    exact_square_sum() : d_(size, 0) {}

    //! Adds the squares of `x`.
    void add(std::span<const T> x) noexcept
    {
        std::int64_t* d = d_.data();
        for (const T v : x) {
            const bits_t b = std::bit_cast<bits_t>(v);
            const int e = static_cast<int>((b >> mantissa_bits) & bits_t(bins - 1));
            bits_t m = b & ((bits_t(1) << mantissa_bits) - 1);
            if (e == special) {
                ++d[special * digits_per_bin + (m != 0 ? 1 : 0)];
                continue;
            }
            if (e != 0) m |= bits_t(1) << mantissa_bits;  // normal: the implicit bit; subnormal: as exponent 1
            const square_t sq = square_t(m) * m;
            std::int64_t* bin = d + e * digits_per_bin;
            for (int k = 0; k < digits_per_bin; ++k)
                bin[k] += static_cast<std::int64_t>((sq >> (digit_bits * k)) & ((std::uint64_t(1) << digit_bits) - 1));
        }
    }
    //! Adds another sum (of other elements).
    void add(const exact_square_sum& other) noexcept
    {
        for (std::size_t i = 0; i < size; ++i) d_[i] += other.d_[i];
    }
    //! The state as integers: sum them element by element across members (all_reduce_sum) to add
    //! the members' sums, exactly and in any order.
    std::span<std::int64_t> digits() noexcept { return d_; }
    std::span<const std::int64_t> digits() const noexcept { return d_; }

    void clear() noexcept { std::fill(d_.begin(), d_.end(), 0); }

    //! The exact sum rounded to the nearest double, ties to even (NaN if a NaN was added, else
    //! +inf if an infinity was; results below 2^-1022 round a second time, as subnormals).
    double value() const
    {
        if (d_[special * digits_per_bin + 1] != 0) return std::numeric_limits<double>::quiet_NaN();
        if (d_[special * digits_per_bin] != 0) return std::numeric_limits<double>::infinity();
        std::array<std::uint64_t, limbs> w{};
        for (int e = 0; e < special; ++e)
            for (int k = 0; k < digits_per_bin; ++k) {
                const std::int64_t v = d_[static_cast<std::size_t>(e * digits_per_bin + k)];
                if (v != 0) add_at(w, static_cast<std::uint64_t>(v), 2 * (std::max(e, 1) - 1) + digit_bits * k);
            }
        int top = limbs - 1;
        while (top >= 0 && w[static_cast<std::size_t>(top)] == 0) --top;
        if (top < 0) return 0.0;
        const int high = 64 * top + 63 - std::countl_zero(w[static_cast<std::size_t>(top)]);  // the leading bit
        const int low = high - 63;  // a 64-bit window [low, high]; the bits below it only break ties
        std::uint64_t window = 0;
        bool sticky = false;
        for (int bit = 0; bit <= high; bit += 64) {  // limb by limb: bits below `low` are sticky
            const std::uint64_t limb = w[static_cast<std::size_t>(bit / 64)];
            if (bit + 63 < low) sticky = sticky || limb != 0;
            else if (bit < low) {
                window |= limb >> (low - bit);
                sticky = sticky || (limb << (64 - (low - bit))) != 0;
            } else window |= limb << (bit - low);
        }
        // The window's bit 63 is set, so converting rounds at bit 10; bit 0 carries the sticky bits
        // below the window and turns an apparent tie into the right direction.
        return std::ldexp(static_cast<double>(window | (sticky ? 1u : 0u)), low + unit_exponent);
    }

private:
    static void add_at(std::array<std::uint64_t, limbs>& w, std::uint64_t v, int bit) noexcept
    {
        std::size_t i = static_cast<std::size_t>(bit / 64);
        const int s = bit % 64;
        std::uint64_t lo = v << s, hi = s == 0 ? 0 : v >> (64 - s);
        w[i] += lo;
        std::uint64_t carry = (w[i] < lo) ? 1 : 0;
        for (++i; (hi != 0 || carry != 0) && i < w.size(); ++i) {
            const std::uint64_t add = hi + carry;  // hi < 2^63: no overflow
            w[i] += add;
            carry = w[i] < add ? 1 : 0;
            hi = 0;
        }
    }

    std::vector<std::int64_t> d_;
};

} // namespace tpipe
