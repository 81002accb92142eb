#pragma once
// The supervision of an iteration, seen from the thread that called tpipe::run: per-rank
// progress (which action each rank is at), completion of the ranks, the watchdog that turns
// "no rank started a new action for a period" into a report of what every rank waits for, and
// the polling of the transport for failures of other processes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "tpipe/core/unit.hpp"
#include "tpipe/schedule/action.hpp"
#include "tpipe/schedule/program.hpp"

namespace tpipe::detail {

struct alignas(64) rank_progress {
    std::atomic<std::size_t> at{0};  //!< 1 + index of the action the rank started last; 0: none yet
    std::atomic<bool> receiving{false};  //!< waits for the payload its current compute consumes
    std::atomic<bool> draining{false};   //!< ran every action; waits for its sends to be released
    std::atomic<bool> finished{false};
};

inline std::string describe(const action& a, const unit& u)
{
    return "'" + to_string(a) + "' (microbatch " + std::to_string(u.microbatch) + ", slice " + std::to_string(u.slice) +
           ", rows [" + std::to_string(u.row_begin) + "," + std::to_string(u.row_end) + "), tokens [" +
           std::to_string(u.token_begin) + "," + std::to_string(u.token_end) + "))";
}

inline std::string what_of(const std::exception_ptr& e)
{
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        return x.what();
    } catch (...) {
        return "an exception not derived from std::exception";
    }
}

//! What every rank of this process waits for. `where(r)` names the process of a rank that runs
//! elsewhere (empty for a rank of this process); `running(r)`, if given, what the compute that
//! rank r is running waits for (the engine knows: e.g. a GPU stream), empty if nothing;
//! `after_backward` names the backward_hook's work.
inline std::string stuck_report(const program& prog, const rank_progress* progress, const std::vector<int>& device,
                                double seconds, const std::function<std::string(int)>& where,
                                const std::function<std::string(int)>& running, const std::string& after_backward)
{
    std::string m = "watchdog: no rank started a new action for " + std::to_string(seconds) + " s;";
    for (int r = 0; r < prog.ranks; ++r) {
        const std::string elsewhere = where(r);
        if (!elsewhere.empty()) continue;  // its own process reports it
        m += " rank " + std::to_string(r) + " (device " + std::to_string(device[r]) + ") ";
        const std::size_t at = progress[r].at.load(std::memory_order_relaxed);
        if (progress[r].finished.load(std::memory_order_relaxed) || at == 0) {
            m += progress[r].finished.load(std::memory_order_relaxed) ? "finished;" : "has not started;";
            continue;
        }
        if (progress[r].draining.load(std::memory_order_relaxed)) {
            m += "ran every action and waits for the transport to deliver its sends or for its " + after_backward + ";";
            continue;
        }
        const action& a = prog.actions[r][at - 1];
        const std::string here = "at action #" + std::to_string(at - 1) + " '" + to_string(a) + "'";
        const bool receiving = progress[r].receiving.load(std::memory_order_relaxed);
        if (receiving && is_compute(a.kind)) {
            // F waits for the previous stage's activation, B/I for the next stage's gradient.
            const bool fwd = a.kind == op::F;
            const action partner{a.stage + (fwd ? -1 : 1), fwd ? op::SEND_F : op::SEND_B, a.microbatch, a.slice};
            const int peer = prog.stage_rank[partner.stage];
            m += "waits " + here + " for '" + to_string(partner) + "' from rank " + std::to_string(peer);
            const std::string peer_at_process = where(peer);
            if (!peer_at_process.empty()) {
                m += " (" + peer_at_process + ");";
                continue;
            }
            const auto& row = prog.actions[peer];
            const std::size_t peer_at = progress[peer].at.load(std::memory_order_relaxed);
            bool ahead = false;
            for (std::size_t k = peer_at == 0 ? 0 : peer_at - 1; k < row.size(); ++k) ahead |= row[k] == partner;
            m += ahead ? " (not reached yet);" : " (which never sends it);";
        } else {
            const std::string waits = running ? running(r) : std::string();
            std::string what = here;
            if (is_compute(a.kind) && prog.units.contains(a.microbatch, a.slice))
                what = "at action #" + std::to_string(at - 1) + " of stage " + std::to_string(a.stage) + " " +
                       describe(a, prog.units.at(prog.units.index(a.microbatch, a.slice)));
            m += "is running " + what + (waits.empty() ? " (the stage function has not returned);" : ": " + waits + ";");
        }
    }
    m.pop_back();
    return m;
}

//! The calling thread's side of an iteration: waits until every rank of this process finished.
class completion {
public:
    void start(int ranks)
    {
        std::lock_guard<std::mutex> g(m_);
        remaining_ = ranks;
        end_ = 0;
    }
    //! A rank finished at time t (any thread).
    void done(double t) noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        end_ = std::max(end_, t);
        if (--remaining_ == 0) cv_.notify_all();
    }
    double end() const noexcept { return end_; }

    //! Waits for the ranks. Every tick (watchdog / 10, within [1, 100] ms) it calls poll(), and
    //! stalled() when the sum of `progress` has not changed for `watchdog` (0: no watchdog).
    //! Each is called at most until one of them returns true (an error was raised). If the ranks
    //! still have not finished `watchdog` after the watchdog raised its error (a stage function
    //! that never returns: cancellation cannot interrupt it), it calls still_running() once.
    template <class Poll, class Stalled, class StillRunning>
    void wait(std::chrono::milliseconds watchdog, const rank_progress* progress, int ranks, Poll&& poll,
              Stalled&& stalled, StillRunning&& still_running)
    {
        // No spinning here: the calling thread would take a core from a loop thread.
        std::unique_lock<std::mutex> lk(m_);
        const auto tick = watchdog.count() > 0
                              ? std::clamp(watchdog / 10, std::chrono::milliseconds(1), std::chrono::milliseconds(100))
                              : std::chrono::milliseconds(100);
        std::size_t seen = ~std::size_t{0};
        auto changed = std::chrono::steady_clock::now();
        bool raised = false, stuck_told = false;
        auto raised_at = changed;
        while (remaining_ > 0) {
            cv_.wait_for(lk, tick, [&] { return remaining_ == 0; });
            if (remaining_ == 0) continue;
            if (raised) {
                if (!stuck_told && watchdog.count() > 0 && std::chrono::steady_clock::now() - raised_at >= watchdog) {
                    stuck_told = true;
                    lk.unlock();
                    still_running();
                    lk.lock();
                }
                continue;
            }
            lk.unlock();
            raised = poll();
            if (raised) raised_at = std::chrono::steady_clock::now();
            if (!raised && watchdog.count() > 0) {
                std::size_t sum = 0;
                for (int r = 0; r < ranks; ++r) sum += progress[r].at.load(std::memory_order_relaxed);
                const auto now = std::chrono::steady_clock::now();
                if (sum != seen) {
                    seen = sum;
                    changed = now;
                } else if (now - changed >= watchdog) {
                    raised = stalled();
                    raised_at = now;
                }
            }
            lk.lock();
        }
    }

private:
    std::mutex m_;
    std::condition_variable cv_;
    int remaining_ = 0;
    double end_ = 0;
};

} // namespace tpipe::detail
