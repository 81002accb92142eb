#pragma once
// tpipe::nccl::nccl_error: a failed NCCL call or an asynchronous NCCL error, as a tpipe::error
// that names the call, the rank and NCCL's reason. No NCCL include: the host-side logic that
// throws it (tpipe/nccl/basic_communicator.hpp) is built and tested without NCCL.
#include <string>

#include "tpipe/core/error.hpp"

namespace tpipe::nccl {

//! A failed NCCL call; code() is the ncclResult_t (as an int).
class nccl_error : public tpipe::error {
public:
    nccl_error(const std::string& what, int code) : tpipe::error(what), code_(code) {}
    int code() const noexcept { return code_; }

private:
    int code_;
};

} // namespace tpipe::nccl
