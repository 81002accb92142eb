#pragma once
// A small JSON value with a strict parser and a writer: enough for model files, CLI output
// and traces, without pulling a dependency into a header-only library.
#include <algorithm>
#include <cmath>
#include <charconv>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe::json {

class value;
using array = std::vector<value>;
using object = std::map<std::string, value>;

class value {
public:
    using storage = std::variant<std::nullptr_t, bool, double, std::string, array, object>;

    value() : v_(nullptr) {}
    value(std::nullptr_t) : v_(nullptr) {}
    value(bool b) : v_(b) {}
    value(double d) : v_(d) {}
    value(int i) : v_(static_cast<double>(i)) {}
    value(std::int64_t i) : v_(static_cast<double>(i)) {}
    value(std::size_t i) : v_(static_cast<double>(i)) {}
    value(const char* s) : v_(std::string(s)) {}
    value(std::string s) : v_(std::move(s)) {}
    value(array a) : v_(std::move(a)) {}
    value(object o) : v_(std::move(o)) {}

    bool is_null() const { return std::holds_alternative<std::nullptr_t>(v_); }
    bool is_number() const { return std::holds_alternative<double>(v_); }
    bool is_string() const { return std::holds_alternative<std::string>(v_); }
    bool is_array() const { return std::holds_alternative<array>(v_); }
    bool is_object() const { return std::holds_alternative<object>(v_); }

    double as_number(std::string_view what = "value") const { return get<double>(what, "a number"); }
    const std::string& as_string(std::string_view what = "value") const { return get<std::string>(what, "a string"); }
    const array& as_array(std::string_view what = "value") const { return get<array>(what, "an array"); }
    const object& as_object(std::string_view what = "value") const { return get<object>(what, "an object"); }
    bool as_bool(std::string_view what = "value") const { return get<bool>(what, "true or false"); }

    //! Member of an object; throws parse_error naming the missing key.
    const value& at(const std::string& key) const
    {
        const auto& o = as_object("JSON document");
        auto it = o.find(key);
        if (it == o.end()) throw parse_error("JSON object has no key \"" + key + "\"");
        return it->second;
    }
    bool contains(const std::string& key) const { return is_object() && as_object().count(key) != 0; }

    const storage& raw() const { return v_; }

private:
    template <class T>
    const T& get(std::string_view what, const char* expected) const
    {
        if (auto p = std::get_if<T>(&v_)) return *p;
        throw parse_error(std::string(what) + " must be " + expected);
    }
    storage v_;
};

namespace detail {
//! Length of the well-formed UTF-8 sequence starting at s[i] (RFC 3629: no overlongs, no
//! surrogates, nothing above U+10FFFF), or 0 if the bytes there are not one.
inline std::size_t utf8_sequence(std::string_view s, std::size_t i)
{
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    const unsigned char b0 = byte(i);
    if (b0 < 0x80) return 1;
    std::size_t n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) n = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) {
        n = 3;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        n = 4;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + n > s.size() || byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (std::size_t k = 2; k < n; ++k)
        if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    return n;
}

//! Writes s as a JSON string; bytes that are not UTF-8 become U+FFFD, so the output is always JSON.
inline void write_string(std::ostream& os, std::string_view s)
{
    os << '"';
    for (std::size_t i = 0; i < s.size();) {
        const char c = s[i];
        const std::size_t n = utf8_sequence(s, i);
        if (n == 0) {
            os << "\\ufffd";
            ++i;
            continue;
        }
        if (n > 1) {
            os << s.substr(i, n);
            i += n;
            continue;
        }
        ++i;
        switch (c) {
        case '"': os << "\\\""; break;
        case '\\': os << "\\\\"; break;
        case '\n': os << "\\n"; break;
        case '\t': os << "\\t"; break;
        case '\r': os << "\\r"; break;
        default:
            if (static_cast<unsigned char>(c) < 0x20) {
                const char* hex = "0123456789abcdef";
                os << "\\u00" << hex[(c >> 4) & 0xf] << hex[c & 0xf];
            } else {
                os << c;
            }
        }
    }
    os << '"';
}

inline void write_number(std::ostream& os, double d)
{
    if (!std::isfinite(d)) throw error("JSON cannot represent a non-finite number");
    if (d == std::floor(d) && std::fabs(d) < 1e15) {
        os << static_cast<std::int64_t>(d);
    } else {
        std::ostringstream tmp;
        tmp.precision(17);
        tmp << d;
        os << tmp.str();
    }
}

class parser {
public:
    explicit parser(std::string_view text) : s_(text) {}

    value document()
    {
        value v = any();
        skip_ws();
        if (i_ != s_.size()) fail("unexpected text after the JSON value");
        return v;
    }

private:
    [[noreturn]] void fail(const std::string& what) const
    {
        std::size_t line = 1, col = 1;
        for (std::size_t k = 0; k < i_ && k < s_.size(); ++k) {
            if (s_[k] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        throw parse_error("JSON, line " + std::to_string(line) + " column " + std::to_string(col) + ": " + what);
    }
    void skip_ws()
    {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
    }
    bool eat(char c)
    {
        skip_ws();
        if (i_ < s_.size() && s_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect(char c)
    {
        if (!eat(c)) fail(std::string("expected '") + c + "'");
    }
    bool word(std::string_view w)
    {
        if (s_.substr(i_, w.size()) == w) {
            i_ += w.size();
            return true;
        }
        return false;
    }
    value any()
    {
        if (++depth_ > 256) fail("nesting too deep");
        skip_ws();
        if (i_ >= s_.size()) fail("unexpected end of input");
        value v;
        char c = s_[i_];
        if (c == '{') v = obj();
        else if (c == '[') v = arr();
        else if (c == '"') v = str();
        else if (word("true")) v = true;
        else if (word("false")) v = false;
        else if (word("null")) v = nullptr;
        else v = num();
        --depth_;
        return v;
    }
    value obj()
    {
        expect('{');
        object o;
        if (eat('}')) return o;
        do {
            skip_ws();
            if (i_ >= s_.size() || s_[i_] != '"') fail("expected a string key");
            const std::size_t key_at = i_;
            std::string k = str();
            expect(':');
            value v = any();
            if (!o.emplace(std::move(k), std::move(v)).second) {
                i_ = key_at;
                fail("duplicate key " + dump_key(s_, key_at));
            }
        } while (eat(','));
        expect('}');
        return o;
    }
    value arr()
    {
        expect('[');
        array a;
        if (eat(']')) return a;
        do a.push_back(any());
        while (eat(','));
        expect(']');
        return a;
    }
    std::string str()
    {
        ++i_;  // opening quote
        std::string out;
        while (true) {
            if (i_ >= s_.size()) fail("unterminated string");
            const char c = s_[i_];
            if (c == '"') {
                ++i_;
                return out;
            }
            if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string (escape it, e.g. \\n)");
            if (c != '\\') {
                const std::size_t n = utf8_sequence(s_, i_);
                if (n == 0) fail("invalid UTF-8 in a string");
                out += s_.substr(i_, n);
                i_ += n;
                continue;
            }
            ++i_;
            if (i_ >= s_.size()) fail("unterminated escape");
            const char e = s_[i_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'u': append_utf8(out, code_point()); break;
            default: --i_; fail(std::string("unknown escape \\") + e);
            }
        }
    }
    //! The code point of a \\uXXXX escape (i_ just after the u), joining a surrogate pair.
    unsigned code_point()
    {
        unsigned cp = hex4();
        if (cp >= 0xDC00 && cp <= 0xDFFF) fail("\\u escape is a lone low surrogate (U+DC00..U+DFFF must follow a high one)");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!word("\\u")) fail("\\u escape is a high surrogate not followed by a \\u low surrogate");
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("\\u high surrogate followed by something other than a low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
        }
        return cp;
    }
    unsigned hex4()
    {
        unsigned cp = 0;
        for (int k = 0; k < 4; ++k, ++i_) {
            if (i_ >= s_.size()) fail("\\u escape needs 4 hex digits");
            const char h = s_[i_];
            const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) fail("\\u escape needs 4 hex digits");
            cp = cp * 16 + static_cast<unsigned>(d);
        }
        return cp;
    }
    static void append_utf8(std::string& out, unsigned cp)
    {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }
    //! The key starting at the quote s[at], for an error message (cut short if long).
    static std::string dump_key(std::string_view s, std::size_t at)
    {
        std::size_t end = at + 1;
        while (end < s.size() && s[end] != '"' && end - at < 64) end += s[end] == '\\' ? 2 : 1;
        return std::string(s.substr(at, std::min(end + 1, s.size()) - at));
    }
    //! RFC 8259's number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, and finite as a double.
    value num()
    {
        const std::size_t start = i_;
        const auto digit = [&] { return i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; };
        const auto digits = [&](const char* what) {
            if (!digit()) fail(what);
            while (digit()) ++i_;
        };
        if (i_ < s_.size() && s_[i_] == '+') fail("a number cannot start with '+' (JSON has no plus sign)");
        if (i_ < s_.size() && s_[i_] == '-') ++i_;
        if (!digit()) fail(i_ == start ? "expected a value" : "expected a digit after '-'");
        if (s_[i_] == '0') {
            ++i_;
            if (digit()) {
                i_ = start;
                fail("number has a leading zero");
            }
        } else {
            digits("expected a digit");
        }
        if (i_ < s_.size() && s_[i_] == '.') {
            ++i_;
            digits("expected a digit after '.'");
        }
        if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
            ++i_;
            if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
            digits("expected a digit in the exponent");
        }
        const std::string_view tok = s_.substr(start, i_ - start);
        double d = 0;  // the grammar above is a subset of from_chars' (which ignores the locale)
        const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), d);
        if (ec != std::errc{} || end != tok.data() + tok.size() || !std::isfinite(d)) {
            i_ = start;
            fail("number " + std::string(tok) + " does not fit a double");
        }
        return d;
    }

    std::string_view s_;
    std::size_t i_ = 0;
    int depth_ = 0;
};
} // namespace detail

inline value parse(std::string_view text) { return detail::parser(text).document(); }

inline void write(std::ostream& os, const value& v)
{
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::nullptr_t>) os << "null";
            else if constexpr (std::is_same_v<T, bool>) os << (x ? "true" : "false");
            else if constexpr (std::is_same_v<T, double>) detail::write_number(os, x);
            else if constexpr (std::is_same_v<T, std::string>) detail::write_string(os, x);
            else if constexpr (std::is_same_v<T, array>) {
                os << '[';
                for (std::size_t i = 0; i < x.size(); ++i) {
                    if (i) os << ',';
                    write(os, x[i]);
                }
                os << ']';
            } else {
                os << '{';
                bool first = true;
                for (const auto& [k, e] : x) {
                    if (!first) os << ',';
                    first = false;
                    detail::write_string(os, k);
                    os << ':';
                    write(os, e);
                }
                os << '}';
            }
        },
        v.raw());
}

inline std::string dump(const value& v)
{
    std::ostringstream os;
    write(os, v);
    return os.str();
}

} // namespace tpipe::json
