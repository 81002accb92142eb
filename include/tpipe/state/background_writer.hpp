#pragma once
// One job at a time on a thread of its own: a save's disk writes run there while training goes
// on. wait() joins it and rethrows what the job threw, so a failed write is never lost.
#include <exception>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "tpipe/state/errors.hpp"

namespace tpipe::state {

class background_writer {
public:
    background_writer() = default;
    background_writer(const background_writer&) = delete;
    background_writer& operator=(const background_writer&) = delete;
    //! Joins a job still running (its error, if any, is dropped: call wait() to see it).
    ~background_writer()
    {
        if (thread_.joinable()) thread_.join();
    }

    //! Starts `job` after the previous one finished (waiting for it, and rethrowing its error).
    void start(std::function<void()> job)
    {
        wait();
        try {
            thread_ = std::thread([this, job = std::move(job)] {
                try {
                    job();
                } catch (...) {
                    error_ = std::current_exception();
                }
            });
        } catch (const std::system_error& e) {  // EAGAIN: the process's thread or memory limit
            throw write_error(std::string("cannot start the checkpoint writer's thread: ") + e.what() +
                              " (a thread or memory limit: ulimit -u, ulimit -v)");
        }
    }

    //! Blocks until the running job (if any) is done; rethrows its exception.
    void wait()
    {
        if (thread_.joinable()) thread_.join();
        if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    }

    bool running() const { return thread_.joinable(); }

private:
    std::thread thread_;
    std::exception_ptr error_;
};

} // namespace tpipe::state
