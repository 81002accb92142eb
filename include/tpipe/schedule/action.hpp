#pragma once
// Actions of the schedule IR and their text form, PyTorch's action strings (`2F0` = stage 2,
// forward, microbatch 0; `1SEND_F1`; `0UNSHARD`) extended by an optional token-slice field:
// `2F0.3` is slice 3 of microbatch 0. Slice 0 is printed without the field.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/quote.hpp"

namespace tpipe {

//! The first eight kinds are the ones tpipe's own lowering emits and its runtime runs; the rest
//! are PyTorch's, carried so that its programs can be read, written and simulated.
enum class op : std::uint8_t {
    F,       //!< forward
    B,       //!< full backward (input and weight gradients)
    I,       //!< backward for the input gradient only (zero-bubble split)
    W,       //!< backward for the weight gradient only (zero-bubble split)
    SEND_F,  //!< start sending a forward output to the next stage (never blocks)
    RECV_F,  //!< post the receive of a forward input; the consuming F waits for the data
    SEND_B,  //!< start sending an input gradient to the previous stage (never blocks)
    RECV_B,  //!< post the receive of an output gradient; the consuming B/I waits for the data
    WAIT_SEND_F,       //!< block until this rank's SEND_F of the unit has arrived (PyTorch frees the buffer)
    WAIT_SEND_B,       //!< block until this rank's SEND_B of the unit has arrived
    UNSHARD,           //!< FSDP: start gathering a stage's parameters; its computes wait for them
    RESHARD,           //!< FSDP: free a stage's gathered parameters; no compute of it until UNSHARD
    REDUCE_GRAD,       //!< start reducing a stage's gradients over microbatches (PyTorch scales them by 1/M)
    WAIT_REDUCE_GRAD,  //!< block until the stage's REDUCE_GRAD is done
    OVERLAP_F_B,       //!< groups the computes that follow it into one step (PyTorch runs them in order)
};

inline constexpr int op_count = 15;

constexpr bool is_compute(op k) { return k <= op::W; }
//! Point-to-point traffic between stages: sends, receives and waits for sends.
constexpr bool is_comm(op k) { return (k >= op::SEND_F && k <= op::RECV_B) || k == op::WAIT_SEND_F || k == op::WAIT_SEND_B; }
//! The kinds tpipe's runtime runs (those tpipe's lowering emits).
constexpr bool is_runnable(op k) { return k <= op::RECV_B; }
//! Kinds that name a stage only: no microbatch, no slice (`0UNSHARD`, `3REDUCE_GRAD`).
constexpr bool is_stage_level(op k) { return k >= op::UNSHARD && k <= op::WAIT_REDUCE_GRAD; }

constexpr std::string_view name(op k)
{
    constexpr std::array<std::string_view, op_count> names{
        "F",           "B",       "I",       "W",           "SEND_F",           "RECV_F",     "SEND_B", "RECV_B",
        "WAIT_SEND_F", "WAIT_SEND_B", "UNSHARD", "RESHARD", "REDUCE_GRAD", "WAIT_REDUCE_GRAD", "OVERLAP_F_B"};
    return names[static_cast<int>(k)];
}

//! One entry of a rank's list. Stage-level kinds keep microbatch and slice at 0. An OVERLAP_F_B
//! entry is a header: `microbatch` holds how many compute entries after it form the group, and
//! its stage is -1 (as in PyTorch, the group has no stage of its own).
struct action {
    int stage = 0;
    op kind = op::F;
    int microbatch = 0;
    int slice = 0;
    friend constexpr bool operator==(const action&, const action&) = default;
};

//! The header of a group of `n` computes run as one step (PyTorch's `(a;b)OVERLAP_F_B`).
constexpr action overlap_header(int n) { return action{-1, op::OVERLAP_F_B, n, 0}; }

//! One action's text. A group header alone prints as `OVERLAP_F_B[n]`; `to_csv` prints whole groups.
inline std::string to_string(const action& a)
{
    if (a.kind == op::OVERLAP_F_B) return std::string(name(a.kind)) + "[" + std::to_string(a.microbatch) + "]";
    std::string s = std::to_string(a.stage);
    s += name(a.kind);
    if (is_stage_level(a.kind)) return s;
    s += std::to_string(a.microbatch);
    if (a.slice != 0) {
        s += '.';
        s += std::to_string(a.slice);
    }
    return s;
}

namespace detail {
inline constexpr std::string_view action_form =
    " (form <stage><kind><microbatch>[.<slice>], kind one of F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, "
    "WAIT_SEND_F, WAIT_SEND_B; or <stage><UNSHARD|RESHARD|REDUCE_GRAD|WAIT_REDUCE_GRAD>; "
    "or (<action>;<action>...)OVERLAP_F_B)";
constexpr bool is_digit(char c) { return c >= '0' && c <= '9'; }
constexpr int parse_int(std::string_view s, std::size_t& i, std::string_view whole)
{
    if (i >= s.size() || !is_digit(s[i]))
        throw parse_error("action " + quote(whole) + ": expected a number at position " + std::to_string(i) +
                          std::string(action_form));
    long long v = 0;
    while (i < s.size() && is_digit(s[i])) {
        v = v * 10 + (s[i++] - '0');
        if (v > 1'000'000'000) throw parse_error("action " + quote(whole) + ": number too large");
    }
    return static_cast<int>(v);
}
} // namespace detail

//! Parses one action: `2F0`, `1SEND_B3`, `0I2.5`, `0UNSHARD`. Throws tpipe::parse_error naming
//! what was expected.
constexpr action parse_action(std::string_view text)
{
    std::size_t i = 0;
    action a;
    a.stage = detail::parse_int(text, i, text);
    // Longest names first, so that "WAIT_SEND_F" is not read as something shorter.
    constexpr std::array<op, 14> order{op::WAIT_REDUCE_GRAD, op::REDUCE_GRAD, op::WAIT_SEND_F, op::WAIT_SEND_B,
                                       op::UNSHARD,          op::RESHARD,     op::SEND_F,      op::RECV_F,
                                       op::SEND_B,           op::RECV_B,      op::F,           op::B,
                                       op::I,                op::W};
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
        throw parse_error("action " + quote(text) + ": unknown kind after the stage number;" +
                          std::string(detail::action_form));
    if (is_stage_level(a.kind)) {
        if (i != text.size())
            throw parse_error("action " + quote(text) + ": " + std::string(name(a.kind)) +
                              " names a stage only, so nothing may follow it (write '" + std::to_string(a.stage) +
                              std::string(name(a.kind)) + "')");
        return a;
    }
    a.microbatch = detail::parse_int(text, i, text);
    if (i < text.size() && text[i] == '.') {
        ++i;
        a.slice = detail::parse_int(text, i, text);
    }
    if (i != text.size())
        throw parse_error("action " + quote(text) + ": unexpected trailing text '" +
                          std::string(text.substr(i)) + "'");
    return a;
}

//! Parses one cell of a rank's list: a single action, or a group `(0F3;3B1)OVERLAP_F_B`, which
//! becomes its header followed by its computes.
constexpr std::vector<action> parse_cell(std::string_view text)
{
    if (text.empty() || text.front() != '(') return {parse_action(text)};
    const std::size_t close = text.find(')');
    const std::string_view tail = close == std::string_view::npos ? std::string_view{} : text.substr(close + 1);
    if (close == std::string_view::npos || tail != name(op::OVERLAP_F_B))
        throw parse_error("action " + quote(text) + ": a group must read (<action>;<action>...)OVERLAP_F_B");
    std::vector<action> out{overlap_header(0)};
    std::string_view inner = text.substr(1, close - 1);
    while (!inner.empty()) {
        const std::size_t semi = inner.find(';');
        std::string_view part = inner.substr(0, semi);
        while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
        while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
        const action a = parse_action(part);
        if (!is_compute(a.kind))
            throw parse_error("action " + quote(text) + ": OVERLAP_F_B groups computes (F, B, I, W), not '" +
                              to_string(a) + "'");
        out.push_back(a);
        inner = semi == std::string_view::npos ? std::string_view{} : inner.substr(semi + 1);
    }
    out.front().microbatch = static_cast<int>(out.size()) - 1;
    if (out.front().microbatch < 2)
        throw parse_error("action " + quote(text) + ": OVERLAP_F_B groups at least two computes");
    return out;
}

} // namespace tpipe
