#pragma once
// Helpers shared by the reference-GPT tests.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpt/model.hpp"

namespace gpt_test {

inline gpt::config tiny_config(bool tied = true)
{
    gpt::config c;
    c.vocab = 13;
    c.d_model = 8;
    c.heads = 2;
    c.layers = 2;
    c.seq_len = 6;
    c.tied = tied;
    return c;
}

inline gpt::batch random_batch(const gpt::config& c, std::int64_t rows, std::int64_t seq, std::uint64_t seed)
{
    gpt::batch b;
    b.rows = rows;
    b.seq_len = seq;
    std::uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    auto next = [&] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<std::int32_t>((s >> 33) % static_cast<std::uint64_t>(c.vocab));
    };
    for (std::int64_t i = 0; i < rows * seq; ++i) {
        b.inputs.push_back(next());
        b.targets.push_back(next());
    }
    return b;
}

//! ||a - b|| / max(||b||, tiny)
template <class T, class U>
double rel_err(const T* a, const U* b, std::int64_t n)
{
    double num = 0, den = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
        num += d * d;
        den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
    }
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}

template <class T, class U>
double rel_err(const std::vector<T>& a, const std::vector<U>& b)
{
    return rel_err(a.data(), b.data(), static_cast<std::int64_t>(std::min(a.size(), b.size())));
}

} // namespace gpt_test
