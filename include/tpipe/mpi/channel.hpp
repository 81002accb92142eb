#pragma once
// tpipe::mpi::channel<T>: a tpipe::channel between ranks of different MPI processes. A payload
// travels as two messages (tpipe/transport/payload_traits.hpp): its header (shape), then its body,
// received in place into the object that payload_traits<T>::make(header) builds.
//
// Receiving end: post(tag) posts the header's MPI_Irecv, early (the runner posts every receive
// of a rank when the rank starts its iteration). Once the header has arrived the body's
// MPI_Irecv is posted by whoever advances the channel first: the receiving loop while it waits
// (a tpipe::poller), or the progress thread while the loop computes, so a large body moves
// during the receiver's compute. arrival(tag) completes once the body is in place.
// Sending end: send(tag, v) keeps v and posts its two MPI_Isends at once; the payload is
// released when both complete (given to its tpipe::payload_pool when it is a
// tpipe::recyclable_payload, so that a later receive of that size reuses its body instead of
// allocating and zero-filling one); drain() completes when every send of the iteration has.
//
// Threads: the loop that owns an end calls send/post/arrival/ready/take; progress() may also
// run on the progress thread; a mutex (try-locked by the progress thread) keeps MPI calls on one
// request to one thread at a time. Needs MPI_THREAD_MULTIPLE (tpipe::mpi::environment).
//
// Message tags: tag_base + 2 * tag (header) and + 1 (body), on a communicator of tpipe's own;
// the transport makes the bases distinct per boundary and direction.
#include <mpi.h>

#include <atomic>
#include <climits>
#include <coroutine>
#include <cstddef>
#include <exception>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/polled_awaiter.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/transport/recyclable_payload.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/mpi/request.hpp"

namespace tpipe::mpi {

template <class T>
class channel final : private detail::progress_hook {
    static_assert(byte_payload<T>,
                  "tpipe::mpi::channel: this stage payload type has no byte form, so it cannot cross processes; "
                  "specialise tpipe::payload_traits<T> for it (see tpipe/transport/payload_traits.hpp)");
    static_assert(tpipe::detail::check_recyclable_payload<T>());  // recycling declared, or a sentence

public:
    using value_type = T;
    using traits = payload_traits<T>;
    using header = typename traits::header;

    //! One direction of one boundary: this process sends to (or receives from) process `peer`
    //! on `comm`, tags [0, tags) as MPI tags tag_base + 2 * tag + {0, 1}.
    channel(MPI_Comm comm, int peer, int tag_base, bool sending, int tags)
        : comm_(comm), peer_(peer), tag_base_(tag_base), sending_(sending)
    {
        reset(tags);
        detail::add_progress_hook(this);
    }
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;
    ~channel()
    {
        detail::remove_progress_hook(this);
        std::lock_guard<std::mutex> g(m_);
        abandon();
    }

    // ---- sending end ------------------------------------------------------------------------
    void send(int tag, T&& v)
    {
        if (!sending_) throw error("mpi::channel: send on the receiving end of a channel");
        std::lock_guard<std::mutex> g(m_);
        send_slot& s = at(sends_, tag);
        if (s.value) throw error("mpi::channel: tag " + std::to_string(tag) + " was sent twice in one iteration");
        s.value.emplace(std::move(v));
        s.head = traits::header_of(*s.value);
        const std::span<const std::byte> body = traits::bytes(std::as_const(*s.value));
        if (body.size() > static_cast<std::size_t>(INT_MAX))
            throw error("mpi::channel: a payload body of " + std::to_string(body.size()) +
                        " bytes exceeds MPI's int count (2 GiB); split the payload");
        check(MPI_Isend(&s.head, static_cast<int>(sizeof(header)), MPI_BYTE, peer_, tag_base_ + 2 * tag, comm_, &s.head_req),
              "MPI_Isend (payload header)");
        detail::begin_outstanding();
        if (!body.empty()) {
            check(MPI_Isend(body.data(), static_cast<int>(body.size()), MPI_BYTE, peer_, tag_base_ + 2 * tag + 1, comm_,
                            &s.body_req),
                  "MPI_Isend (payload body)");
            detail::begin_outstanding();
        }
        pending_sends_.push_back(tag);
        unsent_.fetch_add(1, std::memory_order_relaxed);
    }

    //! Completes once every payload sent this iteration was released (both MPI sends done).
    auto drain()
    {
        return wait_for(this, [](channel& c) {
            c.try_progress();
            return c.unsent_.load(std::memory_order_acquire) == 0;
        });
    }

    // ---- receiving end ----------------------------------------------------------------------
    //! Posts the receive of `tag`'s header (once per iteration; later calls do nothing).
    void post(int tag)
    {
        if (sending_) throw error("mpi::channel: post on the sending end of a channel");
        std::lock_guard<std::mutex> g(m_);
        recv_slot& s = at(recvs_, tag);
        if (s.state.load(std::memory_order_relaxed) != idle) return;
        check(MPI_Irecv(&s.head, static_cast<int>(sizeof(header)), MPI_BYTE, peer_, tag_base_ + 2 * tag, comm_, &s.req),
              "MPI_Irecv (payload header)");
        detail::begin_outstanding();
        s.state.store(header_posted, std::memory_order_relaxed);
        pending_recvs_.push_back(tag);
    }

    //! Completes once the payload of `tag` is in place (posts the receive if nobody did).
    auto arrival(int tag)
    {
        post(tag);
        return wait_for(this, [tag](channel& c) {
            c.try_progress();
            return c.arrived(tag);
        });
    }

    bool ready(int tag) const noexcept
    {
        return tag >= 0 && tag < tags_ && recvs_[tag].state.load(std::memory_order_acquire) == full;
    }

    T take(int tag)
    {
        recv_slot& s = at(recvs_, tag);
        return tpipe::detail::take_arrived(s.state, s.value, full, taken, "mpi::channel", tag);
    }

    // ---- both ends --------------------------------------------------------------------------

    //! Starts a new iteration with room for `tags` tags, whose arrivals and drains throw
    //! operation_cancelled once `stop` is stopped. Requests a cancelled iteration left behind
    //! are cancelled and freed.
    void reset(int tags, std::stop_token stop = {})
    {
        if (tags < 0) throw invalid_argument("mpi::channel: the number of tags must be >= 0");
        std::lock_guard<std::mutex> g(m_);
        abandon();
        if (tags != tags_) {
            recvs_ = std::vector<recv_slot>(static_cast<std::size_t>(tags));
            sends_ = std::vector<send_slot>(static_cast<std::size_t>(tags));
            tags_ = tags;
        }
        for (auto& s : recvs_) {
            s.state.store(idle, std::memory_order_relaxed);
            s.value.reset();
        }
        for (auto& s : sends_) s.value.reset();
        error_ = nullptr;
        stop_ = std::move(stop);
    }

private:
    enum state_t : int { idle, header_posted, body_posted, full, taken };

    struct recv_slot {
        std::atomic<int> state{idle};
        header head{};
        MPI_Request req = MPI_REQUEST_NULL;
        std::optional<T> value;
    };
    struct send_slot {
        header head{};
        MPI_Request head_req = MPI_REQUEST_NULL, body_req = MPI_REQUEST_NULL;
        std::optional<T> value;
    };

    //! Awaits `done(channel)` from the loop: tested at once, then by a poller while idle.
    template <class Done>
    struct waiter final : polled_awaiter<waiter<Done>> {
        channel* c;
        Done done;

        waiter(channel* ch, Done d) : c(ch), done(std::move(d)) {}

        bool settle() noexcept
        {
            detail::note_tested();  // this thread drives MPI's progress: the progress thread may rest
            return c->stop_.stop_requested() || c->failed() || done(*c);
        }
        void await_resume()
        {
            if (c->stop_.stop_requested()) throw operation_cancelled();
            c->rethrow_failure();
        }
    };
    template <class Done>
    static waiter<Done> wait_for(channel* c, Done d)
    {
        return waiter<Done>(c, std::move(d));
    }

    template <class Slot>
    Slot& at(std::vector<Slot>& v, int tag)
    {
        if (tag < 0 || tag >= tags_)
            throw error("mpi::channel: tag " + std::to_string(tag) + " is outside [0, " + std::to_string(tags_) + ")");
        return v[static_cast<std::size_t>(tag)];
    }

    bool arrived(int tag) const noexcept { return recvs_[tag].state.load(std::memory_order_acquire) == full; }
    bool failed() const noexcept { return has_error_.load(std::memory_order_acquire); }
    void rethrow_failure()
    {
        if (!failed()) return;
        std::lock_guard<std::mutex> g(m_);
        if (error_) std::rethrow_exception(error_);
    }

    //! The progress thread's entry: advances the channel unless its loop is doing so.
    void progress() noexcept override { try_progress(); }

    void try_progress() noexcept
    {
        std::unique_lock<std::mutex> g(m_, std::try_to_lock);
        if (!g.owns_lock()) return;
        try {
            advance_recvs();
            advance_sends();
        } catch (...) {
            error_ = std::current_exception();
            has_error_.store(true, std::memory_order_release);
        }
    }

    //! Tests the pending receives; posts a body receive once its header is in (under m_).
    void advance_recvs()
    {
        for (std::size_t k = 0; k < pending_recvs_.size();) {
            const int tag = pending_recvs_[k];
            if (advance(recvs_[tag], tag)) {
                pending_recvs_[k] = pending_recvs_.back();
                pending_recvs_.pop_back();
            } else {
                ++k;
            }
        }
    }

    bool advance(recv_slot& s, int tag)
    {
        int flag = 0;
        MPI_Status st{};
        if (s.state.load(std::memory_order_relaxed) == header_posted) {
            check(MPI_Test(&s.req, &flag, &st), "MPI_Test (payload header)");
            if (!flag) return false;
            detail::end_outstanding();
            expect(st, sizeof(header), tag, "header");
            // The other channels' finished sends give their bodies back to the payload pool
            // first, so that this body can be one of them: a sending channel is otherwise reaped
            // only by its own drain or the progress thread, and a ping-pong would allocate,
            // zero-fill and page-fault a fresh body per message (hooks only try-lock: no deadlock).
            if constexpr (recyclable_payload<T>) detail::run_progress_hooks(this);
            s.value.emplace(traits::make(s.head));
            const std::span<std::byte> body = traits::bytes(*s.value);
            if (body.empty()) {
                s.state.store(full, std::memory_order_release);
                return true;
            }
            if (body.size() > static_cast<std::size_t>(INT_MAX))
                throw error("mpi::channel: a payload body of " + std::to_string(body.size()) +
                            " bytes exceeds MPI's int count (2 GiB)");
            check(MPI_Irecv(body.data(), static_cast<int>(body.size()), MPI_BYTE, peer_, tag_base_ + 2 * tag + 1, comm_,
                            &s.req),
                  "MPI_Irecv (payload body)");
            detail::begin_outstanding();
            s.state.store(body_posted, std::memory_order_relaxed);
        }
        check(MPI_Test(&s.req, &flag, &st), "MPI_Test (payload body)");
        if (!flag) return false;
        detail::end_outstanding();
        expect(st, traits::bytes(std::as_const(*s.value)).size(), tag, "body");
        s.state.store(full, std::memory_order_release);
        return true;
    }

    //! Refuses a message of another size than the receiver expects.
    void expect(const MPI_Status& st, std::size_t bytes, int tag, const char* part) const
    {
        int n = 0;
        check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
        if (static_cast<std::size_t>(n) != bytes)
            throw error("mpi::channel: the payload " + std::string(part) + " of tag " + std::to_string(tag) +
                        " from process " + std::to_string(peer_) + " has " + std::to_string(n) +
                        " bytes, but this process expects " + std::to_string(bytes) +
                        " (the processes disagree on the payload type or its payload_traits)");
    }

    //! Releases the payloads whose sends completed (under m_).
    void advance_sends()
    {
        for (std::size_t k = 0; k < pending_sends_.size();) {
            send_slot& s = sends_[pending_sends_[k]];
            for (MPI_Request* r : {&s.head_req, &s.body_req}) {
                if (*r == MPI_REQUEST_NULL) continue;
                int flag = 0;
                check(MPI_Test(r, &flag, MPI_STATUS_IGNORE), "MPI_Test (payload send)");
                if (flag) detail::end_outstanding();
            }
            if (s.head_req == MPI_REQUEST_NULL && s.body_req == MPI_REQUEST_NULL) {
                if constexpr (recyclable_payload<T>) traits::recycle(std::move(*s.value));  // its body serves a later receive
                s.value.reset();
                pending_sends_[k] = pending_sends_.back();
                pending_sends_.pop_back();
                unsent_.fetch_sub(1, std::memory_order_release);
            } else {
                ++k;
            }
        }
    }

    //! Cancels and frees what an interrupted iteration left posted (under m_): receives are
    //! cancelled, sends freed. After a failed iteration the job is expected to end (the runner
    //! refuses to run again over a remote transport).
    void abandon() noexcept
    {
        for (int tag : pending_recvs_) {
            MPI_Request& r = recvs_[tag].req;
            if (r == MPI_REQUEST_NULL) continue;
            MPI_Cancel(&r);
            MPI_Request_free(&r);
            detail::end_outstanding();
        }
        pending_recvs_.clear();
        for (int tag : pending_sends_)
            for (MPI_Request* r : {&sends_[tag].head_req, &sends_[tag].body_req})
                if (*r != MPI_REQUEST_NULL) {
                    MPI_Request_free(r);
                    detail::end_outstanding();
                }
        pending_sends_.clear();
        unsent_.store(0, std::memory_order_relaxed);
        has_error_.store(false, std::memory_order_relaxed);
    }

    MPI_Comm comm_;
    int peer_, tag_base_;
    bool sending_;
    int tags_ = -1;
    std::mutex m_;
    std::vector<recv_slot> recvs_;
    std::vector<send_slot> sends_;
    std::vector<int> pending_recvs_, pending_sends_;
    std::atomic<int> unsent_{0};  //!< sends whose payload the transport still holds
    std::stop_token stop_;  //!< the iteration's: its waits end once it is stopped
    std::atomic<bool> has_error_{false};
    std::exception_ptr error_;
};

static_assert(tpipe::channel<channel<std::vector<float>>>);

} // namespace tpipe::mpi
