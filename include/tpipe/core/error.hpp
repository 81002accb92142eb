#pragma once
// The one run-time error vocabulary of tpipe: every refusal says what was wrong and what
// would be right, and derives from tpipe::error so a trainer can catch them all at once.
#include <stdexcept>
#include <string>

namespace tpipe {

//! Base of every exception tpipe throws.
class error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

//! A caller passed a value outside the domain of the function (bad sizes, unknown names).
class invalid_argument : public error {
public:
    using error::error;
};

//! A program (schedule) breaks a dependency rule or deadlocks.
class invalid_program : public error {
public:
    using error::error;
};

//! Text (CSV, action strings, JSON) that cannot be parsed.
class parse_error : public error {
public:
    using error::error;
};

namespace detail {
[[noreturn]] inline void refuse(const std::string& what) { throw invalid_argument(what); }
inline void require(bool ok, const std::string& what)
{
    if (!ok) refuse(what);
}
} // namespace detail

} // namespace tpipe
