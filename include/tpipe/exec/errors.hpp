#pragma once
// Errors of the runtime: a failed action (naming rank, device, stage, action and unit), a
// watchdog that saw no progress, a failure in another process, a stop the user asked for; and
// (async/operation_cancelled.hpp) the cancellation that stops the other devices' work.
#include <exception>
#include <string>
#include <utility>

#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/schedule/action.hpp"

namespace tpipe {

//! An action of an iteration failed (a stage threw, or a payload was missing); every other
//! device's work was cancelled. what() names rank, device, stage, action and unit, then the
//! original message; cause() rethrows the original exception.
class execution_error : public error {
public:
    execution_error(std::string message, int rank, int device, action what, unit where, std::exception_ptr cause)
        : error(std::move(message)), rank_(rank), device_(device), action_(what), unit_(where), cause_(std::move(cause))
    {
    }
    int rank() const noexcept { return rank_; }
    int device() const noexcept { return device_; }
    int stage() const noexcept { return action_.stage; }
    const tpipe::action& failed_action() const noexcept { return action_; }
    const tpipe::unit& failed_unit() const noexcept { return unit_; }
    const std::exception_ptr& cause() const noexcept { return cause_; }

private:
    int rank_, device_;
    tpipe::action action_;
    tpipe::unit unit_;
    std::exception_ptr cause_;
};

//! No device made progress for the watchdog's period; what() lists what each device waits for.
class watchdog_error : public error {
public:
    using error::error;
};

//! The iteration failed in another process (SPMD); what() names that process and carries its
//! error message.
class peer_error : public error {
public:
    using error::error;
};

//! The user stopped the run (run_options::stop): the iteration was abandoned on every rank, so
//! its outputs and gradients are incomplete.
class stopped_error : public error {
public:
    using error::error;
};

} // namespace tpipe
