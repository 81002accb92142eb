#pragma once
// tpipe::mpi::link and tpipe::mpi::link_engine: the byte link (tpipe/transport/link.hpp) over
// MPI point-to-point messages, which tpipe::linked_channel types. A message is two MPI messages
// on a communicator of tpipe's own: the header (MPI tag tag_base + 2 * tag), then the body
// (+ 1), received in place; an empty body is no message. The engine gives each direction of
// each boundary a block of MPI tags; one over MPI_TAG_UB is refused, naming the boundary.
//
// Progress: a body's receive is posted once its header is in, by whoever polls first: the
// waiting loop, or tpipe::mpi::progress_thread through the hook that drive() registers
// (tpipe/mpi/driven_link.hpp), so a rendezvous-sized body moves while the receiving loop
// computes. Every request counts itself in detail::outstanding(), which wakes the progress
// thread. Needs MPI_THREAD_MULTIPLE (tpipe::mpi::environment).
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/driven_link.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/transport/link.hpp"

namespace tpipe::mpi {

class link final : public driven_link {
public:
    //! To (or from) process `peer` of `comm`, tags [0, tags) as MPI tags tag_base + 2 * tag + {0, 1}.
    link(MPI_Comm comm, int peer, int tag_base, int tags) : comm_(comm), peer_(peer), tag_base_(tag_base) { reset(tags); }
    ~link() override
    {
        stop_driving();
        abandon();
    }

    void send(int tag, std::span<const std::byte> header, std::span<const std::byte> body) override
    {
        send_slot& s = tpipe::detail::slot_at(sends_, tag, [] { return "mpi::link"; });
        s.head_req = isend(header, tag_base_ + 2 * tag, "MPI_Isend (payload header)");
        if (!body.empty()) s.body_req = isend(body, tag_base_ + 2 * tag + 1, "MPI_Isend (payload body)");
        pending_sends_.push_back(tag);
    }

    void post(int tag, std::span<std::byte> header) override
    {
        recv_slot& s = tpipe::detail::slot_at(recvs_, tag, [] { return "mpi::link"; });
        s.head = header;
        s.body_posted = false;
        check(MPI_Irecv(header.data(), static_cast<int>(header.size()), MPI_BYTE, peer_, tag_base_ + 2 * tag, comm_, &s.req),
              "MPI_Irecv (payload header)");
        detail::begin_outstanding();
        pending_recvs_.push_back(tag);
    }

    void poll(link_events& events, bool waiting) override
    {
        if (waiting) detail::note_tested();  // a loop drives MPI's progress: the progress thread may rest
        for (std::size_t k = 0; k < pending_recvs_.size();) {
            if (advance(recvs_[static_cast<std::size_t>(pending_recvs_[k])], pending_recvs_[k], events)) {
                pending_recvs_[k] = pending_recvs_.back();
                pending_recvs_.pop_back();
            } else {
                ++k;
            }
        }
        for (std::size_t k = 0; k < pending_sends_.size();) {
            const int tag = pending_sends_[k];
            send_slot& s = sends_[static_cast<std::size_t>(tag)];
            test_send(s.head_req);
            test_send(s.body_req);
            if (s.head_req == MPI_REQUEST_NULL && s.body_req == MPI_REQUEST_NULL) {
                events.sent(tag);
                pending_sends_[k] = pending_sends_.back();
                pending_sends_.pop_back();
            } else {
                ++k;
            }
        }
    }

    void reset(int tags) override
    {
        abandon();
        if (tags != static_cast<int>(recvs_.size())) {
            recvs_.assign(static_cast<std::size_t>(tags), recv_slot{});
            sends_.assign(static_cast<std::size_t>(tags), send_slot{});
        }
    }

    std::string peer() const override { return "MPI, process " + std::to_string(peer_); }

private:
    struct recv_slot {
        std::span<std::byte> head;
        bool body_posted = false;
        std::size_t body_bytes = 0;
        MPI_Request req = MPI_REQUEST_NULL;
    };
    struct send_slot {
        MPI_Request head_req = MPI_REQUEST_NULL, body_req = MPI_REQUEST_NULL;
    };

    static int count_of(std::size_t bytes)
    {
        if (bytes > static_cast<std::size_t>(INT_MAX))
            throw error("mpi::link: a payload body of " + std::to_string(bytes) +
                        " bytes exceeds MPI's int count (2 GiB); split the payload");
        return static_cast<int>(bytes);
    }

    MPI_Request isend(std::span<const std::byte> b, int mpi_tag, const char* what)
    {
        MPI_Request r = MPI_REQUEST_NULL;
        check(MPI_Isend(b.data(), count_of(b.size()), MPI_BYTE, peer_, mpi_tag, comm_, &r), what);
        detail::begin_outstanding();
        return r;
    }

    void test_send(MPI_Request& r)
    {
        if (r == MPI_REQUEST_NULL) return;
        int flag = 0;
        check(MPI_Test(&r, &flag, MPI_STATUS_IGNORE), "MPI_Test (payload send)");
        if (flag) detail::end_outstanding();
    }

    //! Tests a pending receive; posts the body's receive once the header is in. True once done.
    bool advance(recv_slot& s, int tag, link_events& events)
    {
        int flag = 0;
        MPI_Status st{};
        if (!s.body_posted) {
            check(MPI_Test(&s.req, &flag, &st), "MPI_Test (payload header)");
            if (!flag) return false;
            detail::end_outstanding();
            expect(st, s.head.size(), tag, "header");
            const std::span<std::byte> body = events.place(tag, s.head);
            if (body.empty()) {
                events.arrived(tag);
                return true;
            }
            check(MPI_Irecv(body.data(), count_of(body.size()), MPI_BYTE, peer_, tag_base_ + 2 * tag + 1, comm_, &s.req),
                  "MPI_Irecv (payload body)");
            detail::begin_outstanding();
            s.body_posted = true;
            s.body_bytes = body.size();
        }
        check(MPI_Test(&s.req, &flag, &st), "MPI_Test (payload body)");
        if (!flag) return false;
        detail::end_outstanding();
        expect(st, s.body_bytes, tag, "body");
        events.arrived(tag);
        return true;
    }

    //! Refuses a message of another size than the receiver expects.
    void expect(const MPI_Status& st, std::size_t bytes, int tag, const char* part) const
    {
        int n = 0;
        check(MPI_Get_count(&st, MPI_BYTE, &n), "MPI_Get_count");
        if (static_cast<std::size_t>(n) != bytes)
            throw tpipe::detail::size_mismatch("mpi::link", part, tag, "process " + std::to_string(peer_), std::to_string(n), bytes);
    }

    //! Cancels and frees what an interrupted iteration left posted: receives are cancelled, sends
    //! freed. After a failed iteration the job is expected to end (the runner refuses to run
    //! again over a remote transport).
    void abandon() noexcept
    {
        for (int tag : pending_recvs_) {
            MPI_Request& r = recvs_[static_cast<std::size_t>(tag)].req;
            if (r == MPI_REQUEST_NULL) continue;
            MPI_Cancel(&r);
            MPI_Request_free(&r);
            detail::end_outstanding();
        }
        pending_recvs_.clear();
        for (int tag : pending_sends_)
            for (MPI_Request* r : {&sends_[static_cast<std::size_t>(tag)].head_req, &sends_[static_cast<std::size_t>(tag)].body_req})
                if (*r != MPI_REQUEST_NULL) {
                    MPI_Request_free(r);
                    detail::end_outstanding();
                }
        pending_sends_.clear();
    }

    MPI_Comm comm_;
    int peer_, tag_base_;
    std::vector<recv_slot> recvs_;
    std::vector<send_slot> sends_;
    std::vector<int> pending_recvs_, pending_sends_;
};

//! Opens tpipe::mpi::links on `comm` (tpipe::mpi::transport's own communicator for payloads).
class link_engine final : public tpipe::link_engine {
public:
    explicit link_engine(MPI_Comm comm) : comm_(comm)
    {
        int flag = 0;
        int* ub = nullptr;
        check(MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr(MPI_TAG_UB)");
        tag_ub_ = flag && ub ? *ub : 32767;
    }

    std::unique_ptr<tpipe::link> open(const endpoint& e, int peer) override
    {
        // Each direction of each boundary owns a block of 2 * tags MPI tags (two per message),
        // in boundary order; the last block of the boundary must fit.
        const long long base = 2LL * (2LL * e.boundary + (e.forward ? 0 : 1)) * e.tags;
        const long long top = 2LL * (2LL * e.boundary + 2) * e.tags;
        if (top > tag_ub_)
            throw invalid_argument("mpi::transport: boundary " + std::to_string(e.boundary) + " (between stages " +
                                   std::to_string(e.boundary) + " and " + std::to_string(e.boundary + 1) + ") with " +
                                   std::to_string(e.tags) + " units needs MPI tags up to " + std::to_string(top) +
                                   ", above this MPI's MPI_TAG_UB of " + std::to_string(tag_ub_) +
                                   "; use fewer units per iteration or fewer stages");
        return std::make_unique<link>(comm_, peer, static_cast<int>(base), e.tags);
    }

    std::string name() const override { return "MPI"; }

private:
    MPI_Comm comm_;
    int tag_ub_ = 32767;
};

//! Makes the payload link engine of one transport, collectively over the processes of `comm`
//! (tpipe::ucx::links); tpipe::mpi::job and tpipe::mpi::elastic_driver take one (empty: MPI's own).
using link_maker = std::function<std::unique_ptr<tpipe::link_engine>(MPI_Comm comm)>;

} // namespace tpipe::mpi
