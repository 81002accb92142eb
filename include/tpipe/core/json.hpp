#pragma once
// A small JSON value with a strict parser and a writer: enough for model files, CLI output
// and traces, without pulling a dependency into a header-only library.
#include <cctype>
#include <cmath>
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
inline void write_string(std::ostream& os, const std::string& s)
{
    os << '"';
    for (char c : s) {
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
            std::string k = str();
            expect(':');
            o[k] = any();
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
            char c = s_[i_++];
            if (c == '"') return out;
            if (c != '\\') {
                out += c;
                continue;
            }
            if (i_ >= s_.size()) fail("unterminated escape");
            char e = s_[i_++];
            switch (e) {
            case '"': out += '"'; break;
            case '\\': out += '\\'; break;
            case '/': out += '/'; break;
            case 'n': out += '\n'; break;
            case 't': out += '\t'; break;
            case 'r': out += '\r'; break;
            case 'b': out += '\b'; break;
            case 'f': out += '\f'; break;
            case 'u': {
                if (i_ + 4 > s_.size()) fail("short \\u escape");
                unsigned cp = std::stoul(std::string(s_.substr(i_, 4)), nullptr, 16);
                i_ += 4;
                if (cp < 0x80) out += static_cast<char>(cp);
                else if (cp < 0x800) {
                    out += static_cast<char>(0xC0 | (cp >> 6));
                    out += static_cast<char>(0x80 | (cp & 0x3F));
                } else {
                    out += static_cast<char>(0xE0 | (cp >> 12));
                    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                    out += static_cast<char>(0x80 | (cp & 0x3F));
                }
                break;
            }
            default: fail(std::string("unknown escape \\") + e);
            }
        }
    }
    value num()
    {
        std::size_t start = i_;
        if (i_ < s_.size() && (s_[i_] == '-' || s_[i_] == '+')) ++i_;
        while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || s_[i_] == '.' ||
                                  s_[i_] == 'e' || s_[i_] == 'E' || s_[i_] == '-' || s_[i_] == '+'))
            ++i_;
        if (start == i_) fail("expected a value");
        std::string tok(s_.substr(start, i_ - start));
        std::size_t used = 0;
        double d = 0;
        try {
            d = std::stod(tok, &used);
        } catch (...) {
            used = 0;
        }
        if (used != tok.size()) {
            i_ = start;
            fail("malformed number '" + tok + "'");
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
