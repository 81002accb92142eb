#pragma once
// A small, strict argument reader: every flag must be known to the command and given once, every
// value must parse completely (tpipe/core/checked.hpp: integers in range, finite numbers), and
// anything left over is an error naming it.
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/core/checked.hpp"

namespace tpipe::cli {

class args {
public:
    args(std::vector<std::string> words) : words_(std::move(words)) {}

    //! A boolean switch such as --json.
    bool flag(const std::string& name)
    {
        known_.insert(name);
        once(name);
        for (std::size_t i = 0; i < words_.size(); ++i)
            if (words_[i] == name) {
                used_.insert(i);
                return true;
            }
        return false;
    }

    //! The value after --name, if the flag is present.
    std::optional<std::string> value(const std::string& name)
    {
        known_.insert(name);
        once(name);
        for (std::size_t i = 0; i < words_.size(); ++i)
            if (words_[i] == name) {
                if (i + 1 >= words_.size()) throw invalid_argument(name + " needs a value");
                used_.insert(i);
                used_.insert(i + 1);
                return words_[i + 1];
            }
        return std::nullopt;
    }

    std::string text(const std::string& name, std::string fallback)
    {
        auto v = value(name);
        return v ? *v : std::move(fallback);
    }

    //! The value of --name in [lo, hi] (integers), or finite in [lo, hi] (numbers); the fallback if absent.
    template <class T>
    T number(const std::string& name, T fallback, T lo = std::numeric_limits<T>::lowest(),
             T hi = std::numeric_limits<T>::max())
    {
        auto v = value(name);
        return v ? parse<T>(name, *v, lo, hi) : fallback;
    }

    template <class T>
    T required_number(const std::string& name, T lo = std::numeric_limits<T>::lowest(),
                      T hi = std::numeric_limits<T>::max())
    {
        auto v = value(name);
        if (!v) throw invalid_argument("missing required " + name + " <number>");
        return parse<T>(name, *v, lo, hi);
    }

    //! The next word that is not a flag or a flag's value (a positional argument).
    std::optional<std::string> positional()
    {
        for (std::size_t i = 0; i < words_.size(); ++i)
            if (!used_.count(i) && (words_[i].empty() || words_[i][0] != '-')) {
                used_.insert(i);
                return words_[i];
            }
        return std::nullopt;
    }

    //! Call after reading every option: refuses unknown or unused words.
    void finish() const
    {
        for (std::size_t i = 0; i < words_.size(); ++i)
            if (!used_.count(i)) {
                std::string known;
                for (const auto& k : known_) known += " " + k;
                throw invalid_argument("unexpected argument '" + words_[i] + "'; this command knows:" + known);
            }
    }

    template <class T>
    static T parse(const std::string& name, const std::string& s, T lo = std::numeric_limits<T>::lowest(),
                   T hi = std::numeric_limits<T>::max())
    {
        if constexpr (std::is_integral_v<T>) return parse_integer<T>(name, s, lo, hi);
        else return static_cast<T>(parse_finite(name, s, lo, hi));
    }

private:
    //! A repeated flag would silently win (or be left over): refuse it by name.
    void once(const std::string& name) const
    {
        int seen = 0;
        for (const auto& w : words_) seen += w == name;
        if (seen > 1) throw invalid_argument(name + " is given " + std::to_string(seen) + " times; give it once");
    }

    std::vector<std::string> words_;
    std::set<std::size_t> used_;
    std::set<std::string> known_;
};

} // namespace tpipe::cli
