#pragma once
// The flag reader of tpipe-plan and the example trainers (train_gpt, train_libtorch_gpt): one set
// of rules for every command. `--name=value` is `--name value`; every flag must be known to the
// command and given once (unless the command reads it with values(), e.g. tpipe-plan slice's
// --model, one per stage); every value must parse completely (tpipe/core/checked.hpp: integers in
// range, finite numbers); a flag that does not apply to what else was asked is refused by name;
// anything left over is an error naming it. Every refusal is a usage_error.
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tpipe/core/checked.hpp"
#include "cli/command_line.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/quote.hpp"

namespace tpipe {

//! A command line that cannot be run as given (commands exit with status 2 on it).
class usage_error : public invalid_argument {
public:
    using invalid_argument::invalid_argument;
};

class flag_reader {
public:
    explicit flag_reader(std::vector<std::string> words) : words_(std::move(words)) {}
    //! argv[first..argc) (1: after the program name; 2: after tpipe-plan's command), `--name=value` split.
    flag_reader(int argc, char** argv, int first = 1)
    {
        const command_line line(argc, argv);
        const auto skip = static_cast<std::size_t>(first > 1 ? first - 1 : 0);
        if (skip < line.words().size()) words_.assign(line.words().begin() + static_cast<std::ptrdiff_t>(skip), line.words().end());
    }

    //! Whether --name is on the command line (read or not).
    bool given(std::string_view name) const
    {
        for (const auto& w : words_)
            if (w == name) return true;
        return false;
    }

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
                if (i + 1 >= words_.size()) throw usage_error(name + " needs a value");
                used_.insert(i);
                used_.insert(i + 1);
                return words_[i + 1];
            }
        return std::nullopt;
    }

    //! Every value of a flag that may be given several times (`--model a --model b`), in the
    //! order given; empty when absent. A flag read this way may repeat ("give it once" is for the rest).
    std::vector<std::string> values(const std::string& name)
    {
        known_.insert(name);
        std::vector<std::string> out;
        for (std::size_t i = 0; i < words_.size(); ++i)
            if (words_[i] == name && !used_.count(i)) {
                if (i + 1 >= words_.size()) throw usage_error(name + " needs a value");
                used_.insert(i);
                used_.insert(i + 1);
                out.push_back(words_[i + 1]);
                ++i;
            }
        return out;
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
        if (!v) throw usage_error("missing required " + name + " <number>");
        return parse<T>(name, *v, lo, hi);
    }

    //! A finite number above 0 (a learning rate, a tolerance); the fallback if absent.
    double positive(const std::string& name, double fallback)
    {
        auto v = value(name);
        if (!v) return fallback;
        try {
            const double x = parse_finite(name, *v, 0);
            if (x > 0) return x;
        } catch (const error&) {
        }
        throw usage_error(name + " needs a positive finite number, got " + quote(*v));
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

    //! Refuses each of `names` that was given although `applies` is false: "<name> <why>", for
    //! example why = "applies with --check". Nothing given is ignored silently.
    void applies_only(std::initializer_list<std::string_view> names, bool applies, std::string_view why) const
    {
        if (applies) return;
        for (auto n : names)
            if (given(n)) throw usage_error(std::string(n) + " " + std::string(why));
    }

    //! Call after reading every option: refuses unknown or unused words.
    void finish() const
    {
        for (std::size_t i = 0; i < words_.size(); ++i)
            if (!used_.count(i)) {
                std::string known;
                for (const auto& k : known_) known += " " + k;
                throw usage_error("unexpected argument " + quote(words_[i]) + "; this command knows:" + known);
            }
    }

    template <class T>
    static T parse(const std::string& name, const std::string& s, T lo = std::numeric_limits<T>::lowest(),
                   T hi = std::numeric_limits<T>::max())
    {
        try {
            if constexpr (std::is_integral_v<T>) return parse_integer<T>(name, s, lo, hi);
            else return static_cast<T>(parse_finite(name, s, lo, hi));
        } catch (const usage_error&) {
            throw;
        } catch (const error& e) {
            throw usage_error(e.what());
        }
    }

private:
    //! A repeated flag would silently win (or be left over): refuse it by name.
    void once(const std::string& name) const
    {
        int seen = 0;
        for (const auto& w : words_) seen += w == name;
        if (seen > 1) throw usage_error(name + " is given " + std::to_string(seen) + " times; give it once");
    }

    std::vector<std::string> words_;
    std::set<std::size_t> used_;
    std::set<std::string> known_;
};

} // namespace tpipe
