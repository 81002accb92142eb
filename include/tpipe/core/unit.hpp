#pragma once
// A unit is one piece of pipeline work: rows [row_begin,row_end) of microbatch `microbatch`,
// tokens [token_begin,token_end) of its sequences. Its attention context is token_begin tokens.
#include <cstdint>

namespace tpipe {

struct unit {
    int microbatch = 0;          //!< index of the microbatch (row slice) in the scheme
    int slice = 0;               //!< index of the token slice inside that microbatch
    std::int64_t row_begin = 0;  //!< first batch row
    std::int64_t row_end = 1;    //!< one past the last batch row
    std::int64_t token_begin = 0;
    std::int64_t token_end = 1;

    constexpr std::int64_t rows() const { return row_end - row_begin; }
    constexpr std::int64_t tokens() const { return token_end - token_begin; }
    //! Tokens of the same rows that this unit attends to besides itself (causal K/V cache).
    constexpr std::int64_t context() const { return token_begin; }

    friend constexpr bool operator==(const unit&, const unit&) = default;
};

} // namespace tpipe
