#pragma once
// t(b, s, c) = sum of coefficient * monomial over {1, b, s, c, bs, bc, bsc, bss}: enough for
// TeraPipe's fitted form (a0 + a1 bs + a2 bc + a3 bsc) and attention's quadratic b*s*s term.
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"

namespace tpipe {

class polynomial_latency {
public:
    //! The monomials, in the order of `coefficients()`.
    enum class term : int { one, b, s, c, bs, bc, bsc, bss };
    static constexpr int term_count = 8;
    static constexpr std::array<std::string_view, term_count> term_names{"1",  "b",  "s",   "c",
                                                                         "bs", "bc", "bsc", "bss"};

    polynomial_latency() = default;
    //! Coefficients in term order {1, b, s, c, bs, bc, bsc, bss}; each must be finite.
    explicit polynomial_latency(const std::array<double, term_count>& coefficients) : k_(coefficients)
    {
        for (int i = 0; i < term_count; ++i)
            if (!std::isfinite(k_[i]))
                detail::refuse("polynomial latency: coefficient \"" + std::string(term_names[i]) +
                               "\" must be a finite number");
    }

    //! Term index for a name such as "bsc"; refuses unknown names, listing the known ones.
    static term term_of(std::string_view name)
    {
        for (int i = 0; i < term_count; ++i)
            if (term_names[i] == name) return static_cast<term>(i);
        detail::refuse("polynomial latency: unknown monomial \"" + std::string(name) +
                       "\"; use one of 1, b, s, c, bs, bc, bsc, bss");
    }

    polynomial_latency& set(term t, double coefficient)
    {
        if (!std::isfinite(coefficient)) detail::refuse("polynomial latency: coefficients must be finite");
        k_[static_cast<int>(t)] = coefficient;
        return *this;
    }
    double coefficient(term t) const { return k_[static_cast<int>(t)]; }
    const std::array<double, term_count>& coefficients() const { return k_; }

    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        detail::require_unit_shape(b, s, c, "polynomial latency");
        const double B = static_cast<double>(b), S = static_cast<double>(s), C = static_cast<double>(c);
        return k_[0] + k_[1] * B + k_[2] * S + k_[3] * C + k_[4] * B * S + k_[5] * B * C + k_[6] * B * S * C +
               k_[7] * B * S * S;
    }

    //! True when every coefficient of a term containing s is >= 0, which makes t non-decreasing
    //! in s for b >= 1, c >= 0. (A polynomial with a negative s-term may still be monotone on
    //! the planned range; planners check the values themselves in that case.)
    bool monotone_in_tokens() const
    {
        return k_[2] >= 0 && k_[4] >= 0 && k_[6] >= 0 && k_[7] >= 0;
    }

private:
    std::array<double, term_count> k_{};
};

} // namespace tpipe
