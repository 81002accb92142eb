#pragma once
// A non-negative factor given as a decimal or as p/q (--lambda 1/6).
#include <string>

#include "cli/flag_reader.hpp"

namespace tpipe::cli {

inline double parse_ratio(const std::string& flag, const std::string& text)
{
    double v = 0;
    if (auto slash = text.find('/'); slash != std::string::npos) {
        const double p = flag_reader::parse<double>(flag, text.substr(0, slash));
        const double q = flag_reader::parse<double>(flag, text.substr(slash + 1));
        if (!(q > 0)) throw invalid_argument(flag + " p/q needs q > 0, got '" + text + "'");
        v = p / q;
    } else {
        v = flag_reader::parse<double>(flag, text);
    }
    if (!(v >= 0)) throw invalid_argument(flag + " must be >= 0, got '" + text + "'");
    return v;
}

} // namespace tpipe::cli
