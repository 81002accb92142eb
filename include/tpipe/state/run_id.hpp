#pragma once
// A run's identity: 16 hex digits drawn when a run starts fresh and kept by every resume of it,
// recorded in each manifest. A save directory holds the checkpoints of one run only, and --keep
// deletes only checkpoints carrying this run's identity (checkpoint_directory).
#include <cstdint>
#include <random>
#include <string>

#include "tpipe/core/error.hpp"

namespace tpipe::state {

inline constexpr std::size_t run_id_digits = 16;

//! A new run identity (random: two runs started at once on two hosts differ).
inline std::string new_run_id()
{
    std::random_device rd;
    const std::uint64_t v = (std::uint64_t{rd()} << 32) ^ rd();
    static constexpr char hex[] = "0123456789abcdef";
    std::string s(run_id_digits, '0');
    for (std::size_t i = 0; i < run_id_digits; ++i) s[i] = hex[(v >> (4 * (run_id_digits - 1 - i))) & 0xf];
    return s;
}

//! `text` if it is a run identity; else throws parse_error naming `where`.
inline std::string run_id(const std::string& text, const std::string& where)
{
    if (text.size() != run_id_digits || text.find_first_not_of("0123456789abcdef") != std::string::npos)
        throw parse_error(where + " \"" + text + "\" is not a run identity (16 lowercase hex digits)");
    return text;
}

} // namespace tpipe::state
