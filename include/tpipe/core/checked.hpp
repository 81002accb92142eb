#pragma once
// Checked conversions for values that come from outside (flags, files): text to an integer or a
// finite number, a double to an integer, a wide integer to a narrow one. Each either returns the
// value, exactly, inside the range the caller allows, or throws tpipe::invalid_argument naming
// the value (`what`: a flag or a field), the range, and what it got. Nothing wraps, rounds or
// clamps silently, and no out-of-range float-to-integer cast (undefined behaviour) is reached.
//
//   const int layers = tpipe::parse_integer<int>("--layers", text, 1, 4096);
//   const double f   = tpipe::parse_finite("--f", text, 0);              // >= 0, finite
//   const int tp     = tpipe::checked_integer<int>("tensor_parallel", json_number, 1, 1024);
//   const auto end   = tpipe::checked_sum<std::int64_t>("begin + count", begin, count);
#include <charconv>
#include <cmath>
#include <concepts>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tpipe/core/error.hpp"

namespace tpipe {

namespace detail {
template <class T>
std::string number_text(T v)
{
    if constexpr (std::integral<T>) {
        return std::to_string(v);
    } else {
        char buf[64];
        const auto r = std::to_chars(buf, buf + sizeof buf, v);  // shortest form that reads back exactly
        return std::string(buf, r.ptr);
    }
}

//! "in 1..64" for integers (both ends: a type's limit is a limit too); for numbers "in 0..1",
//! ">= 0", "<= 5" or "" where an end is the largest finite double.
template <class T>
std::string range_text(T lo, T hi)
{
    if constexpr (std::integral<T>) return "in " + number_text(lo) + ".." + number_text(hi);
    constexpr T min = std::numeric_limits<T>::lowest(), max = std::numeric_limits<T>::max();
    if (lo == min && hi == max) return "";
    if (hi == max) return ">= " + number_text(lo);
    if (lo == min) return "<= " + number_text(hi);
    return "in " + number_text(lo) + ".." + number_text(hi);
}

template <class T>
[[noreturn]] void refuse_range(std::string_view what, std::string_view kind, T lo, T hi, std::string_view got)
{
    const std::string range = range_text(lo, hi);
    throw invalid_argument(std::string(what) + " must be " + std::string(kind) + (range.empty() ? "" : " ") + range +
                           ", got '" + std::string(got) + "'");
}
} // namespace detail

//! The whole of `text` as an integer in [lo, hi]; refuses signs on unsigned types, spaces,
//! trailing text, and values outside the range (never wraps).
template <std::integral T>
T parse_integer(std::string_view what, std::string_view text, T lo = std::numeric_limits<T>::min(),
                T hi = std::numeric_limits<T>::max())
{
    // Parse wide, so a value past T's range is reported as out of range rather than wrapped.
    std::conditional_t<std::is_signed_v<T>, long long, unsigned long long> wide = 0;
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(text.data(), last, wide);
    if (ec != std::errc{} || end != last || std::cmp_less(wide, lo) || std::cmp_greater(wide, hi))
        detail::refuse_range(what, "an integer", lo, hi, text);
    return static_cast<T>(wide);
}

//! `v` (a finite number) in [lo, hi].
inline double checked_finite(std::string_view what, double v, double lo = std::numeric_limits<double>::lowest(),
                             double hi = std::numeric_limits<double>::max())
{
    if (!std::isfinite(v) || v < lo || v > hi) detail::refuse_range(what, "a finite number", lo, hi, detail::number_text(v));
    return v;
}

//! The whole of `text` as a finite number in [lo, hi] (decimal or scientific; no inf, no nan,
//! nothing that overflows a double).
inline double parse_finite(std::string_view what, std::string_view text, double lo = std::numeric_limits<double>::lowest(),
                           double hi = std::numeric_limits<double>::max())
{
    double v = 0;
    const char* last = text.data() + text.size();
    const char* first = text.data();
    if (first != last && *first == '+') ++first;  // from_chars refuses '+'; a user may write +1
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc{} || end != last || first == last || !std::isfinite(v))
        detail::refuse_range(what, "a finite number", lo, hi, text);
    if (v < lo || v > hi) detail::refuse_range(what, "a finite number", lo, hi, text);
    return v;
}

//! `v` as an integer of type T in [lo, hi]: refuses fractions, non-finite values and anything
//! outside the range, before any cast.
template <std::integral T>
T checked_integer(std::string_view what, double v, T lo = std::numeric_limits<T>::min(),
                  T hi = std::numeric_limits<T>::max())
{
    if (!std::isfinite(v) || v != std::floor(v) || v < static_cast<double>(lo) || v > static_cast<double>(hi) ||
        std::fabs(v) >= 9007199254740992.0)  // 2^53: past it a double no longer names one integer
        detail::refuse_range(what, "an integer", lo, hi, detail::number_text(v));
    return static_cast<T>(v);
}

//! `v` narrowed to T, inside [lo, hi].
template <std::integral T, std::integral U>
T checked_narrow(std::string_view what, U v, T lo = std::numeric_limits<T>::min(), T hi = std::numeric_limits<T>::max())
{
    if (std::cmp_less(v, lo) || std::cmp_greater(v, hi)) detail::refuse_range(what, "an integer", lo, hi, std::to_string(v));
    return static_cast<T>(v);
}

//! a + b, refusing a result T cannot hold (`what` names the sum) instead of wrapping.
template <std::integral T>
T checked_sum(std::string_view what, T a, T b)
{
    T r{};
    if (__builtin_add_overflow(a, b, &r))
        throw invalid_argument(std::string(what) + " overflows: " + std::to_string(a) + " + " + std::to_string(b) +
                               " does not fit " + std::to_string(sizeof(T) * 8) + " bits");
    return r;
}

//! a * b, refusing a result T cannot hold (`what` names the product) instead of wrapping.
template <std::integral T>
T checked_product(std::string_view what, T a, T b)
{
    T r{};
    if (__builtin_mul_overflow(a, b, &r))
        throw invalid_argument(std::string(what) + " overflows: " + std::to_string(a) + " * " + std::to_string(b) +
                               " does not fit " + std::to_string(sizeof(T) * 8) + " bits");
    return r;
}

} // namespace tpipe
