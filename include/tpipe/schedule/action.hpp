#pragma once
// Actions of the schedule IR and their text form, compatible with PyTorch's action strings
// (`2F0` = stage 2, forward, microbatch 0; `1SEND_F1`) extended by an optional token-slice
// field: `2F0.3` is slice 3 of microbatch 0. Slice 0 is printed without the field.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "tpipe/core/error.hpp"

namespace tpipe {

enum class op : std::uint8_t {
    F,       //!< forward
    B,       //!< full backward (input and weight gradients)
    I,       //!< backward for the input gradient only (zero-bubble split)
    W,       //!< backward for the weight gradient only (zero-bubble split)
    SEND_F,  //!< send a forward output to the next stage
    RECV_F,  //!< receive a forward input from the previous stage
    SEND_B,  //!< send an input gradient to the previous stage
    RECV_B,  //!< receive an output gradient from the next stage
};

constexpr bool is_compute(op k) { return k <= op::W; }
constexpr bool is_comm(op k) { return !is_compute(k); }

constexpr std::string_view name(op k)
{
    constexpr std::array<std::string_view, 8> names{"F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
    return names[static_cast<int>(k)];
}

struct action {
    int stage = 0;
    op kind = op::F;
    int microbatch = 0;
    int slice = 0;
    friend constexpr bool operator==(const action&, const action&) = default;
};

inline std::string to_string(const action& a)
{
    std::string s = std::to_string(a.stage);
    s += name(a.kind);
    s += std::to_string(a.microbatch);
    if (a.slice != 0) {
        s += '.';
        s += std::to_string(a.slice);
    }
    return s;
}

namespace detail {
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr int parse_int(std::string_view s, std::size_t& i, std::string_view whole)
{
    if (i >= s.size() || !is_digit(s[i]))
        throw parse_error("action '" + std::string(whole) +
                          "': expected a number at position " + std::to_string(i) +
                          " (form <stage><F|B|I|W|SEND_F|RECV_F|SEND_B|RECV_B><microbatch>[.<slice>])");
    long long v = 0;
    while (i < s.size() && is_digit(s[i])) {
        v = v * 10 + (s[i++] - '0');
        if (v > 1'000'000'000) throw parse_error("action '" + std::string(whole) + "': number too large");
    }
    return static_cast<int>(v);
}
} // namespace detail

//! Parses `2F0`, `1SEND_B3`, `0I2.5`. Throws tpipe::parse_error naming what was expected.
constexpr action parse_action(std::string_view text)
{
    std::size_t i = 0;
    action a;
    a.stage = detail::parse_int(text, i, text);
    // Longest names first, so that "SEND_F" is not read as something shorter.
    constexpr std::array<op, 8> order{op::SEND_F, op::RECV_F, op::SEND_B, op::RECV_B, op::F, op::B, op::I, op::W};
    bool found = false;
    for (op k : order) {
        auto n = name(k);
        if (text.substr(i, n.size()) == n) {
            a.kind = k;
            i += n.size();
            found = true;
            break;
        }
    }
    if (!found)
        throw parse_error("action '" + std::string(text) + "': unknown kind after the stage number; expected one of "
                          "F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B");
    a.microbatch = detail::parse_int(text, i, text);
    if (i < text.size() && text[i] == '.') {
        ++i;
        a.slice = detail::parse_int(text, i, text);
    }
    if (i != text.size())
        throw parse_error("action '" + std::string(text) + "': unexpected trailing text '" +
                          std::string(text.substr(i)) + "'");
    return a;
}

} // namespace tpipe
