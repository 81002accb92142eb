#pragma once
// tpipe::fingerprint: what the processes of one job must agree on before the first step, as
// named fields in a fixed order (the runner's program and payload types; a trainer's model and
// optimizer configuration, schedule, steps, seed, data content hash, version...). One job whose
// processes were launched differently (an MPMD command line, a wrapper script, a stale binary on
// one node) would otherwise hang, corrupt memory or train a wrong model without a word.
//
// The text form is one "name=value" line per field. A transport's agree(text) compares the
// texts of every process; disagreement(texts) is the one sentence every process throws: the
// first field that differs and which processes hold which value.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/quote.hpp"

namespace tpipe {

class fingerprint {
public:
    //! Adds a field; the value is kept exactly (a newline or backslash in it is escaped).
    fingerprint& add(std::string_view name, std::string_view value)
    {
        text_.append(name);
        text_ += '=';
        for (char c : value) {
            if (c == '\\') text_ += "\\\\";
            else if (c == '\n') text_ += "\\n";
            else text_ += c;
        }
        text_ += '\n';
        return *this;
    }
    //! A number, exactly: integers in decimal, floating point in its shortest round-trip form.
    template <class T>
        requires std::is_arithmetic_v<T>
    fingerprint& add(std::string_view name, T value)
    {
        if constexpr (std::is_same_v<T, bool>) {
            return add(name, std::string_view(value ? "true" : "false"));
        } else {
            char buf[64];
            const auto r = std::to_chars(buf, buf + sizeof buf, value);
            return add(name, std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
        }
    }
    fingerprint& add(std::string_view name, const char* value) { return add(name, std::string_view(value)); }
    fingerprint& add(std::string_view name, const std::string& value) { return add(name, std::string_view(value)); }

    const std::string& text() const noexcept { return text_; }

    //! The fields of a text, in order (a text not in field form is one field, "configuration").
    static std::vector<std::pair<std::string, std::string>> fields(std::string_view text)
    {
        std::vector<std::pair<std::string, std::string>> out;
        std::size_t at = 0;
        while (at < text.size()) {
            std::size_t nl = text.find('\n', at);
            if (nl == std::string_view::npos) nl = text.size();
            const std::string_view line = text.substr(at, nl - at);
            const std::size_t eq = line.find('=');
            if (eq == std::string_view::npos) return {{"configuration", std::string(text)}};
            out.emplace_back(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
            at = nl + 1;
        }
        return out;
    }

private:
    std::string text_;
};

namespace detail {
inline std::string process_list(const std::vector<int>& ps)
{
    std::string s = ps.size() == 1 ? "process " : "processes ";
    for (std::size_t i = 0; i < ps.size(); ++i) {
        if (i == 6 && ps.size() > 7) return s + " and " + std::to_string(ps.size() - 6) + " more";
        s += (i ? ", " : "") + std::to_string(ps[i]);
    }
    return s;
}
} // namespace detail

//! Empty when every process's text is the same; else which field differs first (in process 0's
//! order of fields) and which processes hold which value.
inline std::string disagreement(const std::vector<std::string>& texts)
{
    bool same = true;
    for (const auto& t : texts) same = same && t == texts.front();
    if (same) return {};
    std::vector<std::map<std::string, std::string>> by_process;
    std::vector<std::string> order;  // every field name, process 0's first
    for (const auto& t : texts) {
        std::map<std::string, std::string> m;
        for (auto& [k, v] : fingerprint::fields(t)) {
            bool known = false;
            for (const auto& o : order) known = known || o == k;
            if (!known) order.push_back(k);
            m.emplace(std::move(k), std::move(v));
        }
        by_process.push_back(std::move(m));
    }
    for (const auto& name : order) {
        std::vector<std::pair<std::string, std::vector<int>>> groups;  // value -> processes, first seen first
        for (std::size_t p = 0; p < by_process.size(); ++p) {
            const auto it = by_process[p].find(name);
            const std::string v = it == by_process[p].end() ? std::string("(absent)") : quote(it->second, 80);
            std::size_t g = 0;
            while (g < groups.size() && groups[g].first != v) ++g;
            if (g == groups.size()) groups.push_back({v, {}});
            groups[g].second.push_back(static_cast<int>(p));
        }
        if (groups.size() < 2) continue;
        std::string s = "the processes of this job were launched with different configurations: " + name + " is ";
        for (std::size_t g = 0; g < groups.size(); ++g) {
            if (g == 4 && groups.size() > 5) {
                s += ", and " + std::to_string(groups.size() - 4) + " other values";
                break;
            }
            s += (g ? (g + 1 == groups.size() ? " and " : ", ") : "") + groups[g].first + " on " +
                 detail::process_list(groups[g].second);
        }
        return s + " (every process must run the same binary with the same flags and data)";
    }
    return "the processes of this job were launched with different configurations (every process must run the "
           "same binary with the same flags and data)";
}

} // namespace tpipe
