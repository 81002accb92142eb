#pragma once
// tpipe::mpi::detail::stall_watch: the watchdog of one communicator's collectives
// (tpipe::mpi::communicator::set_watchdog). A collective that has made no progress for the
// bound fails on every member that still runs, with a tpipe::watchdog_error that names the
// members that are silent and what the others wait in.
//
// Why here: a member that stops (SIGSTOP, a debugger, a swapped-out node) leaves the others
// waiting in whatever collective comes next (a gradient all-reduce, a norm's sum, a checkpoint's
// barrier), outside any pipeline's watchdog; MPI itself never times out.
//
// How: a member whose collective has waited bound - grace (grace = bound / 5, at most 2 s) asks
// every other member where it is, with a small note on a private duplicate of the communicator.
// A member waiting in a collective of this communicator answers from its poll (which collective,
// its number in the communicator's order, for how long). At the bound the report names each
// member that answered and what it waits in, and each that did not as silent: stopped, or busy
// outside this communicator's collectives for the whole grace.
//
// A member that is busy on purpose for longer than the bound (process 0 profiling a plan that
// the others wait for) says so with communicator::busy (tpipe/mpi/busy_section.hpp): a thread
// answers the questions with what it does. When every other member answers, waiting or busy, and
// one is busy, the wait is alive and its clock starts again; a busy member that stops stops
// answering too, and the report names what it was doing.
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tpipe/mpi/mpi_error.hpp"

namespace tpipe::mpi::detail {

using watch_clock = std::chrono::steady_clock;

//! Set once a watchdog gave up on a collective (a member stalled): MPI_Finalize would wait for
//! that member, so tpipe::mpi::environment ends the job with MPI_Abort instead.
inline std::atomic<bool>& member_stalled() noexcept
{
    static std::atomic<bool> flag{false};
    return flag;
}

//! The largest watchdog bound any communicator of this process was given (0: none): it bounds
//! the wait for the other processes in tpipe::mpi::environment's MPI_Finalize too.
inline std::atomic<std::int64_t>& largest_watchdog_ms() noexcept
{
    static std::atomic<std::int64_t> ms{0};
    return ms;
}

//! The rank in MPI_COMM_WORLD of each member of `comm`, by its rank in `comm`.
inline std::vector<int> world_ranks(MPI_Comm comm)
{
    int size = 0;
    MPI_Comm_size(comm, &size);
    std::vector<int> members(static_cast<std::size_t>(size)), out(members.size(), -1);
    for (int m = 0; m < size; ++m) members[static_cast<std::size_t>(m)] = m;
    MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
    MPI_Comm_group(comm, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_translate_ranks(mine, size, members.data(), world, out.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&world);
    return out;
}

//! Names process `p` (its rank in MPI_COMM_WORLD) in the watchdog's report.
using process_namer = std::function<std::string(int process)>;

class stall_watch {
public:
    //! Takes `notes`, a private duplicate of the communicator it watches (the caller made it:
    //! the duplicate is itself a collective, bounded in set-up, tpipe/mpi/setup_watch.hpp).
    stall_watch(MPI_Comm notes, std::chrono::milliseconds bound, process_namer name_of)
        : bound_(bound), grace_(std::min<std::chrono::milliseconds>(bound / 5, std::chrono::seconds(2))), name_of_(std::move(name_of)),
          comm_(notes)
    {
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &me_);
        MPI_Comm_size(comm_, &size_);
        process_ = world_ranks(comm_);  // members by their process, for the report
        answers_.resize(static_cast<std::size_t>(size_));
        last_busy_.resize(static_cast<std::size_t>(size_));
        post();
    }
    stall_watch(const stall_watch&) = delete;
    stall_watch& operator=(const stall_watch&) = delete;
    ~stall_watch()
    {
        if (inbox_ != MPI_REQUEST_NULL) {
            MPI_Cancel(&inbox_);
            MPI_Wait(&inbox_, MPI_STATUS_IGNORE);
        }
        for (auto& s : sent_) {
            int done = 0;
            MPI_Test(&s.req, &done, MPI_STATUS_IGNORE);
            if (!done) {  // a note to a member that does not receive: MPI may still read it
                MPI_Request_free(&s.req);
                (void)s.body.release();
            }
        }
        MPI_Comm_free(&comm_);
    }

    std::chrono::milliseconds bound() const noexcept { return bound_; }
    const process_namer& namer() const noexcept { return name_of_; }
    //! Member m of the communicator, as the report names it.
    std::string name(int m) const
    {
        const int p = process_[static_cast<std::size_t>(m)];
        return name_of_ ? name_of_(p) : "process " + std::to_string(p);
    }

    //! From each poll of the collective `what` (#`seq` in this communicator's order) that last
    //! progressed at `since`: answers the other members' questions; once it has waited
    //! bound - grace, asks them; at the bound returns the report (else an empty string).
    std::string poll(const char* what, std::uint64_t seq, watch_clock::time_point since)
    {
        std::lock_guard lock(mutex_);
        if (seq != seq_) {  // another collective: what members were busy with before, and when, is stale
            seq_ = seq;
            std::fill(last_busy_.begin(), last_busy_.end(), note{});
            alive_at_ = {};
        }
        const auto now = watch_clock::now();
        if (now - looked_ >= std::chrono::milliseconds(1)) {  // the inbox at most once a millisecond
            looked_ = now;
            read_inbox(note_kind::answer, what, seq, now - since);
        }
        const auto started = since;
        if (alive_at_ > since) since = alive_at_;
        if (asking_ && survey_since_ == since && alive()) {  // everyone answered, one is busy: wait on
            alive_at_ = now;
            asking_ = false;
            return {};
        }
        if (now - since < bound_ - grace_) return {};
        if (!asking_ || survey_since_ != since) {
            asking_ = true;
            survey_since_ = since;
            ++survey_;
            std::fill(answers_.begin(), answers_.end(), note{});
            for (int m = 0; m < size_; ++m)
                if (m != me_) send(m, make(note_kind::ask, what, seq, now - since, survey_));
        }
        if (now - since < bound_) return {};
        return report(what, seq, now - since, now - started);
    }

    //! From communicator::busy's thread, while this member works outside the communicator's
    //! collectives (for `busy_for` so far): answers the others' questions with `what`.
    void answer_busy(const char* what, watch_clock::duration busy_for)
    {
        std::lock_guard lock(mutex_);
        read_inbox(note_kind::busy, what, 0, busy_for);
    }

private:
    enum class note_kind : std::uint32_t { none, ask, answer, busy };
    struct note {
        note_kind kind = note_kind::none;
        std::uint32_t survey = 0;  //!< the asker's survey this answers
        std::uint64_t seq = 0;
        std::int64_t waited_ms = 0;
        char what[80] = {};
    };
    struct sent_note {
        std::unique_ptr<note> body;
        MPI_Request req = MPI_REQUEST_NULL;
    };

    static note make(note_kind k, const char* what, std::uint64_t seq, watch_clock::duration waited, std::uint32_t survey)
    {
        note n;
        n.kind = k;
        n.survey = survey;
        n.seq = seq;
        n.waited_ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
        std::strncpy(n.what, what, sizeof n.what - 1);
        return n;
    }

    void post() noexcept { MPI_Irecv(&in_, sizeof in_, MPI_BYTE, MPI_ANY_SOURCE, 0, comm_, &inbox_); }

    void send(int m, const note& n)
    {
        sent_.push_back({std::make_unique<note>(n), MPI_REQUEST_NULL});
        MPI_Isend(sent_.back().body.get(), sizeof(note), MPI_BYTE, m, 0, comm_, &sent_.back().req);
    }

    //! Every other member answered this survey, and one of them is busy (so alive).
    bool alive() const noexcept
    {
        bool busy = false;
        for (int m = 0; m < size_; ++m) {
            if (m == me_) continue;
            const note_kind k = answers_[static_cast<std::size_t>(m)].kind;
            if (k == note_kind::none) return false;
            busy = busy || k == note_kind::busy;
        }
        return busy;
    }

    //! Reads the notes that arrived; answers each question as `mine` (answer: waiting in `what`
    //! #seq; busy: doing `what`).
    void read_inbox(note_kind mine, const char* what, std::uint64_t seq, watch_clock::duration waited)
    {
        while (!sent_.empty()) {  // notes sent, oldest first
            int done = 0;
            MPI_Test(&sent_.front().req, &done, MPI_STATUS_IGNORE);
            if (!done) break;
            sent_.pop_front();
        }
        for (;;) {
            int got = 0;
            MPI_Status st{};
            if (MPI_Test(&inbox_, &got, &st) != MPI_SUCCESS || !got) return;
            const note n = in_;
            const int from = st.MPI_SOURCE;
            post();
            if (from < 0 || from >= size_) continue;
            if (n.kind == note_kind::ask) {
                send(from, make(mine, what, seq, waited, n.survey));
                if (asking_) answers_[from] = n;  // it waits in a collective too (its number says which)
            } else if ((n.kind == note_kind::answer || n.kind == note_kind::busy) && asking_ && n.survey == survey_) {
                answers_[from] = n;
                if (n.kind == note_kind::busy) last_busy_[from] = n;
            }
        }
    }

    //! What a note says its sender does: "profiling the TeraPipe plan".
    static std::string what_of(const note& n) { return std::string(n.what, strnlen(n.what, sizeof n.what)); }

    //! A busy note as the report says it: "profiling the TeraPipe plan (for 12.0 s)".
    static std::string text(const note& b) { return what_of(b) + " (for " + seconds(b.waited_ms) + ")"; }

    static std::string seconds(std::int64_t ms)
    {
        char b[32];
        std::snprintf(b, sizeof b, "%.1f s", static_cast<double>(ms) / 1000);
        return b;
    }

    std::string report(const char* what, std::uint64_t seq, watch_clock::duration waited, watch_clock::duration in_all) const
    {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(waited).count();
        std::string r = "watchdog: " + name(me_) + " waits in " + what + " #" + std::to_string(seq) + " and it has made no progress for " +
                        seconds(ms) + " (the bound is " + seconds(bound_.count()) + ")";
        if (in_all - waited >= std::chrono::milliseconds(100))  // the clock started again while a member was busy
            r += " since a busy member last answered, " +
                 seconds(std::chrono::duration_cast<std::chrono::milliseconds>(in_all).count()) + " in all";
        std::string silent;
        int n_silent = 0;
        for (int m = 0; m < size_; ++m) {
            if (m == me_) continue;
            const note& a = answers_[static_cast<std::size_t>(m)];
            if (a.kind == note_kind::none) {
                silent += (n_silent++ ? ", " : "") + name(m);
                const note& b = last_busy_[static_cast<std::size_t>(m)];
                if (b.kind == note_kind::busy)  // it stopped answering while busy: say at what
                    silent += " (last heard " + text(b) + ")";
                continue;
            }
            if (a.kind == note_kind::busy) {  // busy, yet someone else is silent
                r += "; " + name(m) + " is " + text(a);
                continue;
            }
            r += "; " + name(m) + " waits in " + what_of(a) + " #" + std::to_string(a.seq) +
                 " (for " + seconds(a.waited_ms) + ")";
        }
        if (n_silent > 0)
            r += "; " + silent + (n_silent == 1 ? " is" : " are") + " silent: not in this collective and not answering for " +
                 seconds(grace_.count()) + " (stopped, hung, or busy elsewhere); the job cannot go on, and ends";
        else
            r += "; every member waits, yet the collective does not move (MPI or the network is stuck); the job ends";
        return r;
    }

    std::chrono::milliseconds bound_, grace_;
    process_namer name_of_;
    MPI_Comm comm_ = MPI_COMM_NULL;
    int me_ = 0, size_ = 1;
    std::vector<int> process_;
    MPI_Request inbox_ = MPI_REQUEST_NULL;
    note in_{};
    std::deque<sent_note> sent_;
    std::vector<note> answers_;
    std::vector<note> last_busy_;  //!< each member's latest busy answer in collective #seq_ (none: not busy)
    std::uint64_t seq_ = 0;
    bool asking_ = false;
    std::uint32_t survey_ = 0;
    watch_clock::time_point survey_since_{}, looked_{};
    watch_clock::time_point alive_at_{};  //!< when a survey of collective #seq_ last found every member alive, one busy
    std::mutex mutex_;  //!< poll (the loop) and answer_busy (a busy section's thread)
};

} // namespace tpipe::mpi::detail
