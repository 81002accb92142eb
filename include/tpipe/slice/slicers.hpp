#pragma once
// Slicers turn a batch shape into a scheme. Microbatch (GPipe), token (TeraPipe), grid (both).
#include <concepts>
#include <string>
#include <vector>

#include "tpipe/slice/scheme.hpp"

namespace tpipe {

//! A slicer maps a batch shape to the units of one iteration.
template <class S>
concept slicer = requires(const S& s, batch_shape b) {
    { s.scheme(b) } -> std::same_as<tpipe::scheme>;
};

namespace detail {
//! Splits n items into k nearly equal parts, larger parts first. Refuses k > n.
constexpr std::vector<std::int64_t> even_cuts(std::int64_t n, std::int64_t k, const char* what)
{
    if (k < 1) refuse(std::string(what) + ": need at least 1 part, got " + std::to_string(k));
    if (k > n)
        refuse(std::string(what) + ": cannot cut " + std::to_string(n) + " into " + std::to_string(k) +
               " non-empty parts; use at most " + std::to_string(n));
    std::vector<std::int64_t> cuts{0};
    for (std::int64_t i = 0; i < k; ++i) cuts.push_back(cuts.back() + n / k + (i < n % k ? 1 : 0));
    return cuts;
}

constexpr std::vector<std::int64_t> cuts_from_lengths(const std::vector<std::int64_t>& lengths,
                                                      std::int64_t seq_len)
{
    std::vector<std::int64_t> cuts{0};
    for (auto l : lengths) {
        if (l < 1) refuse("token slice lengths must be >= 1, got " + std::to_string(l));
        cuts.push_back(cuts.back() + l);
    }
    if (cuts.back() != seq_len)
        refuse("token slice lengths sum to " + std::to_string(cuts.back()) + " but the sequence has " +
               std::to_string(seq_len) + " tokens");
    return cuts;
}

constexpr tpipe::scheme make_grid(const std::vector<std::int64_t>& row_cuts,
                                  const std::vector<std::int64_t>& token_cuts)
{
    std::vector<scheme::microbatch> mbs;
    for (std::size_t i = 0; i + 1 < row_cuts.size(); ++i)
        mbs.push_back(scheme::microbatch{row_cuts[i], row_cuts[i + 1], token_cuts});
    return tpipe::scheme(std::move(mbs));
}
} // namespace detail

//! GPipe: `count` microbatches of whole sequences (rows split as evenly as possible).
struct microbatch_slicer {
    int count = 1;
    constexpr tpipe::scheme scheme(batch_shape b) const
    {
        return detail::make_grid(detail::even_cuts(b.rows, count, "microbatch slicer (rows)"),
                                 {0, b.seq_len});
    }
};

//! TeraPipe: the whole batch as one microbatch, cut into token slices of the given lengths.
struct token_slicer {
    std::vector<std::int64_t> lengths;
    constexpr tpipe::scheme scheme(batch_shape b) const
    {
        return detail::make_grid({0, b.rows}, detail::cuts_from_lengths(lengths, b.seq_len));
    }
};

//! Rows x tokens: `microbatches` row slices, each with the same token cut.
struct grid_slicer {
    int microbatches = 1;
    std::vector<std::int64_t> lengths;  //!< empty: whole sequences
    constexpr tpipe::scheme scheme(batch_shape b) const
    {
        auto rows = detail::even_cuts(b.rows, microbatches, "grid slicer (rows)");
        auto toks = lengths.empty() ? std::vector<std::int64_t>{0, b.seq_len}
                                    : detail::cuts_from_lengths(lengths, b.seq_len);
        return detail::make_grid(rows, toks);
    }
};

//! Rows x tokens with `slices` equal token slices; refuses a length that does not divide.
struct uniform_grid_slicer {
    int microbatches = 1;
    int slices = 1;
    constexpr tpipe::scheme scheme(batch_shape b) const
    {
        if (slices < 1 || b.seq_len % slices != 0)
            detail::refuse("uniform token slicing needs slices >= 1 dividing the sequence length " +
                           std::to_string(b.seq_len) + ", got " + std::to_string(slices));
        return detail::make_grid(detail::even_cuts(b.rows, microbatches, "grid slicer (rows)"),
                                 detail::even_cuts(b.seq_len, slices, "grid slicer (tokens)"));
    }
};

//! Shorthand for schedule-level work: M microbatches of one row, S equal slices of one token each.
constexpr tpipe::scheme microbatches(int m, int slices = 1)
{
    return uniform_grid_slicer{m, slices}.scheme(batch_shape{m, slices});
}

} // namespace tpipe
