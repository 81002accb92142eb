#pragma once
// tpipe::cuda::cuda_error: a failed CUDA runtime call (or a failed asynchronous completion),
// carrying the error code and the name of the call. No CUDA header here, so that the engine's
// host-side logic and its CPU tests can name the error type (see error_macros.hpp for the macros).
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"

namespace tpipe::cuda {

class cuda_error : public tpipe::error {
public:
    //! `code`: the cudaError_t as an int (0 is success, never thrown); `call`: the API call or
    //! the operation that failed ("cudaEventQuery", "compute on device 1").
    cuda_error(const std::string& message, int code, std::string call)
        : tpipe::error(message), code_(code), call_(std::move(call))
    {
    }
    int code() const noexcept { return code_; }
    const std::string& call() const noexcept { return call_; }

private:
    int code_;
    std::string call_;
};

} // namespace tpipe::cuda
