#pragma once
// Flag values of the example trainers (train_gpt, train_libtorch_gpt): a bad value is a
// usage_error (exit status 2) saying what the flag needs.
#include <cmath>
#include <stdexcept>
#include <string>

namespace tpipe_examples {

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

//! The integer value of `flag`, at least `lo`.
inline long long to_int(const std::string& flag, const std::string& v, long long lo)
{
    std::size_t pos = 0;
    long long x = 0;
    try {
        x = std::stoll(v, &pos);
    } catch (...) {
        pos = 0;
    }
    if (pos != v.size() || v.empty()) throw usage_error(flag + " needs an integer, got '" + v + "'");
    if (x < lo) throw usage_error(flag + " must be >= " + std::to_string(lo) + ", got " + v);
    return x;
}

//! The positive number value of `flag`.
inline double to_double(const std::string& flag, const std::string& v)
{
    std::size_t pos = 0;
    double x = 0;
    try {
        x = std::stod(v, &pos);
    } catch (...) {
        pos = 0;
    }
    if (pos != v.size() || v.empty() || !std::isfinite(x) || x <= 0)
        throw usage_error(flag + " needs a positive number, got '" + v + "'");
    return x;
}

} // namespace tpipe_examples
