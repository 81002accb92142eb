#pragma once
// The cancellation of an awaited operation: what channels, communicators and engines throw into
// a coroutine that waits while its iteration is cancelled.
#include "tpipe/core/error.hpp"

namespace tpipe {

//! Thrown into a coroutine that waits while its iteration is cancelled. tpipe::run never lets
//! it escape: it reports the error that caused the cancellation instead.
class operation_cancelled : public error {
public:
    operation_cancelled() : error("the operation was cancelled because the iteration failed elsewhere") {}
};

} // namespace tpipe
