#pragma once
// tpipe::mpi::busy_section: a member of a watched communicator that works outside its
// collectives on purpose, for longer than the watchdog's bound, while the others wait for it
// (process 0 profiling the plan that every process then receives). Made by communicator::busy.
//
// Without it the others' watchdog cannot tell that member from a stopped one, so a job either
// sets the bound after the long work (and a process stopped during it hangs the job) or a bound
// longer than the work. With it a thread answers the watchdog's questions with what the member
// does, so the others wait on while it answers, and report it, by what it was doing, once it
// stops answering (SIGSTOP stops the thread too). See tpipe/mpi/stall_watch.hpp.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "tpipe/mpi/stall_watch.hpp"

namespace tpipe::mpi {

class [[nodiscard]] busy_section {
public:
    busy_section() = default;
    //! Answers `watch`'s questions with `what` (at most 79 characters) until destroyed; null: no
    //! watchdog, nothing to do.
    busy_section(detail::stall_watch* watch, std::string what)
    {
        if (!watch) return;
        a_ = std::make_unique<answerer>();
        a_->what = std::move(what);
        a_->thread = std::jthread([watch, a = a_.get(), start = detail::watch_clock::now()](std::stop_token stop) {
            try {
                while (!stop.stop_requested()) {
                    watch->answer_busy(a->what.c_str(), detail::watch_clock::now() - start);
                    std::this_thread::sleep_for(std::chrono::milliseconds(10));
                }
            } catch (...) {  // out of memory for a note: the others will report this member silent
            }
        });
    }

private:
    struct answerer {
        std::string what;
        std::jthread thread;  // last: joined before `what` goes
    };
    std::unique_ptr<answerer> a_;
};

} // namespace tpipe::mpi
