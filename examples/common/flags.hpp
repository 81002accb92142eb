#pragma once
// Flag values of the example trainers (train_gpt, train_libtorch_gpt): a bad value is a
// usage_error (exit status 2) saying what the flag needs. The checks are tpipe's own
// (tpipe/core/checked.hpp): nothing wraps, rounds or clamps silently.
#include <limits>
#include <stdexcept>
#include <string>

#include <tpipe/core/checked.hpp>

namespace tpipe_examples {

struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

//! The integer value of `flag`, in [lo, hi].
template <class T = int>
T to_int(const std::string& flag, const std::string& v, T lo, T hi = std::numeric_limits<T>::max())
{
    try {
        return tpipe::parse_integer<T>(flag, v, lo, hi);
    } catch (const tpipe::error& e) {
        throw usage_error(e.what());
    }
}

//! The positive finite number value of `flag`.
inline double to_double(const std::string& flag, const std::string& v)
{
    try {
        const double x = tpipe::parse_finite(flag, v, 0);
        if (x > 0) return x;
    } catch (const tpipe::error&) {
    }
    throw usage_error(flag + " needs a positive finite number, got '" + v + "'");
}

} // namespace tpipe_examples
