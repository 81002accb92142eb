#pragma once
// tpipe::mpi::mpi_error and tpipe::mpi::check: an MPI error code becomes a tpipe::error that
// says which call failed and why (MPI_Error_string). tpipe's communicators use
// MPI_ERRORS_RETURN, so every failed call reaches check() instead of aborting the job.
#include <mpi.h>

#include <string>

#include "tpipe/core/error.hpp"

namespace tpipe::mpi {

//! A failed MPI call; code() is the MPI error code.
class mpi_error : public tpipe::error {
public:
    mpi_error(const std::string& what, int code) : tpipe::error(what), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

//! The message for MPI error code rc from call `what`.
inline std::string error_message(int rc, const char* what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
    std::string msg = std::string(what) + " failed: ";
    msg += len > 0 ? std::string(text, static_cast<std::size_t>(len)) : std::string("unknown MPI error");
    msg += " (MPI error code " + std::to_string(rc) + ")";
    return msg;
}

//! Throws mpi_error unless rc is MPI_SUCCESS.
inline void check(int rc, const char* what)
{
    if (rc != MPI_SUCCESS) throw mpi_error(error_message(rc, what), rc);
}

} // namespace tpipe::mpi
