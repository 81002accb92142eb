#pragma once
// Reading a whole input file (a program CSV, a latency model) with the reasons a user needs when
// it cannot be read: missing, a directory, unreadable, or larger than any input tpipe plans from.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>

#include "tpipe/core/error.hpp"

namespace tpipe {

//! Largest input file read whole (programs and models are kilobytes; this refuses a mistake such
//! as a data set passed for a model before it is read into memory).
inline constexpr std::uintmax_t max_input_file_bytes = std::uintmax_t{256} << 20;

//! The bytes of the file at `path`; `what` names it in errors ("latency model file", ...).
inline std::string read_file(const std::string& path, const std::string& what)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto status = fs::status(path, ec);
    if (ec || !fs::exists(status)) throw invalid_argument(what + " \"" + path + "\" does not exist");
    if (fs::is_directory(status)) throw invalid_argument(what + " \"" + path + "\" is a directory, not a file");
    if (fs::is_regular_file(status)) {
        const auto size = fs::file_size(path, ec);
        if (!ec && size > max_input_file_bytes)
            throw invalid_argument(what + " \"" + path + "\" has " + std::to_string(size) + " bytes; inputs are read "
                                   "whole, up to " + std::to_string(max_input_file_bytes >> 20) + " MiB");
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw invalid_argument("cannot open " + what + " \"" + path + "\"");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw invalid_argument("failed while reading " + what + " \"" + path + "\"");
    return text.str();
}

} // namespace tpipe
