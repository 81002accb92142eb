#pragma once
// An exact rational in (0, 1], for the freeze degree alpha: schedules such as
// ceil(L (1 - (1 - alpha)^e)) must not depend on how 1/3 rounds in binary.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <string_view>

#include "tpipe/core/error.hpp"

namespace tpipe::elastic {

struct fraction {
    std::int64_t num = 1;
    std::int64_t den = 2;

    //! Largest denominator a fraction may have (so that products stay exact in 64 bits).
    static constexpr std::int64_t max_den = 1'000'000;

    //! num/den reduced; refuses den <= 0, a value outside (0, 1] or a denominator above max_den.
    static fraction of(std::int64_t num, std::int64_t den)
    {
        if (den <= 0) detail::refuse("fraction: denominator must be > 0, got " + std::to_string(den));
        const std::int64_t g = std::gcd(num, den);
        fraction f{g ? num / g : num, g ? den / g : den};
        if (f.num <= 0 || f.num > f.den)
            detail::refuse("freeze degree alpha must lie in (0, 1], got " + std::to_string(num) + "/" +
                           std::to_string(den));
        if (f.den > max_den)
            detail::refuse("fraction: denominator " + std::to_string(f.den) + " exceeds " + std::to_string(max_den));
        return f;
    }

    //! The fraction with the smallest denominator (at most max_den) within 1e-12 of x: the
    //! double 1.0/3 becomes exactly 1/3 (continued-fraction convergents).
    static fraction nearest(double x)
    {
        if (!(x > 0 && x <= 1)) detail::refuse("freeze degree alpha must lie in (0, 1], got " + std::to_string(x));
        std::int64_t p0 = 0, q0 = 1, p1 = 1, q1 = 0;
        double r = x;
        for (int i = 0; i < 64; ++i) {
            const double a = std::floor(r);
            const auto ai = static_cast<std::int64_t>(a);
            const std::int64_t p2 = ai * p1 + p0, q2 = ai * q1 + q0;
            if (q2 > max_den) break;
            p0 = p1, q0 = q1, p1 = p2, q1 = q2;
            if (std::fabs(static_cast<double>(p1) / static_cast<double>(q1) - x) <= 1e-12 || r - a < 1e-15) break;
            r = 1.0 / (r - a);
        }
        if (std::fabs(static_cast<double>(p1) / static_cast<double>(q1) - x) > 1e-9)
            detail::refuse("freeze degree " + std::to_string(x) + " has no fraction with denominator <= " +
                           std::to_string(max_den) + "; give it as p/q");
        return of(p1, q1);
    }

    //! "1/3", "0.25" (exact decimal) or "1".
    static fraction parse(std::string_view s)
    {
        auto number = [&](std::string_view t) {
            std::int64_t v = 0;
            auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
            if (t.empty() || ec != std::errc{} || p != t.data() + t.size())
                detail::refuse("freeze degree must be p/q or a decimal such as 0.25, got '" + std::string(s) + "'");
            return v;
        };
        if (auto slash = s.find('/'); slash != std::string_view::npos)
            return of(number(s.substr(0, slash)), number(s.substr(slash + 1)));
        if (auto dot = s.find('.'); dot != std::string_view::npos) {
            const auto digits = s.substr(dot + 1);
            if (digits.size() > 6) detail::refuse("freeze degree '" + std::string(s) + "': at most 6 decimals");
            std::int64_t den = 1;
            for (std::size_t i = 0; i < digits.size(); ++i) den *= 10;
            const std::int64_t whole = dot ? number(s.substr(0, dot)) : 0;
            return of(whole * den + (digits.empty() ? 0 : number(digits)), den);
        }
        return of(number(s), 1);
    }

    constexpr double value() const { return static_cast<double>(num) / static_cast<double>(den); }
    std::string str() const { return std::to_string(num) + "/" + std::to_string(den); }
    friend constexpr bool operator==(const fraction&, const fraction&) = default;
};

} // namespace tpipe::elastic
