#pragma once
// tpipe::ucx::link_engine: pipeline payloads over UCX's tagged messages (UCP), the engine Open
// MPI itself runs on, as a byte link (tpipe/transport/link.hpp) that tpipe::linked_channel
// types. It is the whole UCX transport: MPI keeps the control plane (the layout, the agreement,
// failure notices) and bootstraps the engine, and the payloads travel over UCX:
//
//   tpipe::mpi::environment env(argc, argv);
//   tpipe::ucx::link_engine ucx(MPI_COMM_WORLD);                  // collective: swaps worker addresses
//   tpipe::mpi::transport x(layout, {.replica = d}, MPI_COMM_WORLD, &ucx);
//   tpipe::runner r(pipe, prog, engine, x);                       // as over MPI
//
// (tpipe::mpi::job takes it too: job(axes, MPI_COMM_WORLD, tpipe::ucx::links).)
//
// One UCP worker per engine, with an endpoint to each peer made when a link first needs it. A
// message is two UCP tagged messages, header then body, received in place; the 64-bit UCP tag
// is (sender's process: 16 bits, boundary and direction: 16, 2 * tag + part: 32), matched in
// full, so one engine serves one pipeline (give each transport its own). Calls to UCP are
// serialised by the engine's mutex (links of several pipeline ranks may poll at once). UCP
// progresses while a loop polls its link, and while the loops compute, MPI's progress thread
// (tpipe::mpi::progress_thread, where tpipe::mpi::environment starts it) advances the channels
// through the hooks their links register (tpipe/mpi/driven_link.hpp), as for MPI's links: a
// body moves while its receiver computes. Errors name the UCX status and the peer.
#include <mpi.h>
#include <ucp/api/ucp.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/mpi/agree.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/driven_link.hpp"
#include "tpipe/mpi/progress.hpp"
#include "tpipe/transport/link.hpp"

namespace tpipe::ucx {

namespace detail {
inline void check(ucs_status_t s, const char* what)
{
    if (s != UCS_OK) throw error(std::string("UCX: ") + what + " failed: " + ucs_status_string(s));
}
} // namespace detail

class link_engine;

//! One direction of one boundary over UCP tagged messages (made by link_engine::open).
class link final : public mpi::driven_link {
public:
    link(link_engine& engine, ucp_ep_h ep, int peer, std::uint64_t stream, int tags);
    ~link() override
    {
        stop_driving();
        abandon();
    }

    void send(int tag, std::span<const std::byte> header, std::span<const std::byte> body) override;
    void post(int tag, std::span<std::byte> header) override;
    void poll(link_events& events, bool waiting) override;
    void reset(int tags) override
    {
        abandon();
        sends_.assign(static_cast<std::size_t>(tags), send_slot{});
        recvs_.assign(static_cast<std::size_t>(tags), recv_slot{});
    }
    std::string peer() const override { return "UCX, process " + std::to_string(peer_); }

private:
    struct recv_slot {
        std::span<std::byte> head;
        std::size_t body_bytes = 0;
        bool body_posted = false;
        void* req = nullptr;
    };
    struct send_slot {
        void* head = nullptr;
        void* body = nullptr;
    };

    std::uint64_t ucp_tag(std::uint64_t from, int tag, int part) const noexcept
    {
        return from << 48 | stream_ << 32 | static_cast<std::uint64_t>(2 * tag + part);
    }
    void* receive(std::span<std::byte> into, int tag, int part);
    bool received(void*& req, std::size_t bytes, int tag, const char* part);
    bool sent(void*& req);
    void abandon() noexcept;

    link_engine& engine_;
    ucp_ep_h ep_;
    int peer_;
    std::uint64_t stream_;
    std::vector<recv_slot> recvs_;
    std::vector<send_slot> sends_;
    std::vector<int> pending_recvs_, pending_sends_;  //!< each counts in mpi::detail::outstanding()
};

//! The UCP context and worker of this process, and its endpoints to the other processes of
//! `comm`. Construction is collective over `comm`: every process makes it, in the same order.
class link_engine final : public tpipe::link_engine {
public:
    explicit link_engine(MPI_Comm comm)
    {
        mpi::check(MPI_Comm_rank(comm, &me_), "MPI_Comm_rank");
        std::string address;  // empty: this process could not start UCX
        std::string why;
        try {
            start();
            ucp_address_t* a = nullptr;
            std::size_t n = 0;
            detail::check(ucp_worker_get_address(worker_, &a, &n), "ucp_worker_get_address");
            address.assign(reinterpret_cast<const char*>(a), n);
            ucp_worker_release_address(worker_, a);
        } catch (const std::exception& e) {
            why = e.what();
        }
        addresses_ = mpi::detail::all_gather_text(comm, address, "tpipe::ucx::link_engine (worker addresses)");
        for (std::size_t p = 0; p < addresses_.size(); ++p)
            if (addresses_[p].empty()) {
                stop();  // no destructor runs after a throwing constructor
                throw error("ucx::link_engine: UCX did not start on process " + std::to_string(p) +
                            (static_cast<int>(p) == me_ ? ": " + why : std::string(" (its own error says why)")));
            }
    }
    link_engine(const link_engine&) = delete;
    link_engine& operator=(const link_engine&) = delete;
    ~link_engine() override
    {
        std::lock_guard<std::mutex> g(m_);
        for (auto& [peer, ep] : eps_) close(ep);
        stop();
    }

    std::unique_ptr<tpipe::link> open(const endpoint& e, int peer) override
    {
        if (peer < 0 || peer >= static_cast<int>(addresses_.size()) || peer == me_)
            throw invalid_argument("ucx::link_engine: no peer process " + std::to_string(peer) + " among " +
                                   std::to_string(addresses_.size()));
        if (e.boundary >= (1 << 15) || e.tags >= (1 << 30) || me_ >= (1 << 16) || peer >= (1 << 16))
            throw invalid_argument("ucx::link_engine: boundary " + std::to_string(e.boundary) + " with " + std::to_string(e.tags) +
                                   " units between processes " + std::to_string(me_) + " and " + std::to_string(peer) +
                                   " does not fit the UCP tag (16 bits of process, 15 of boundary, 30 of unit)");
        const auto stream = static_cast<std::uint64_t>(2 * e.boundary + (e.forward ? 0 : 1));
        return std::make_unique<link>(*this, endpoint_to(peer), peer, stream, e.tags);
    }

    std::string name() const override { return "UCX"; }
    int process() const noexcept { return me_; }

private:
    friend class link;

    ucp_ep_h endpoint_to(int peer)
    {
        std::lock_guard<std::mutex> g(m_);
        ucp_ep_h& ep = eps_[peer];
        if (!ep) {
            ucp_ep_params_t params{};
            params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
            params.address = reinterpret_cast<const ucp_address_t*>(addresses_[static_cast<std::size_t>(peer)].data());
            detail::check(ucp_ep_create(worker_, &params, &ep), "ucp_ep_create");
        }
        return ep;
    }

    void start()
    {
        ucp_params_t params{};
        params.field_mask = UCP_PARAM_FIELD_FEATURES;
        params.features = UCP_FEATURE_TAG;
        detail::check(ucp_init(&params, nullptr, &context_), "ucp_init");
        ucp_worker_params_t wp{};
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // every call holds m_
        detail::check(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
    }

    void stop() noexcept
    {
        if (worker_) ucp_worker_destroy(worker_);
        if (context_) ucp_cleanup(context_);
        worker_ = nullptr;
        context_ = nullptr;
    }

    //! Flushes and closes an endpoint, forcing it after a second (the peer may be gone).
    void close(ucp_ep_h ep) noexcept
    {
        ucp_request_param_t p{};
        void* r = ucp_ep_close_nbx(ep, &p);
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (UCS_PTR_IS_PTR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) {
            ucp_worker_progress(worker_);
            if (std::chrono::steady_clock::now() > give_up) {
                ucp_request_free(r);
                p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
                p.flags = UCP_EP_CLOSE_FLAG_FORCE;
                r = ucp_ep_close_nbx(ep, &p);
            }
        }
        if (UCS_PTR_IS_PTR(r)) ucp_request_free(r);
    }

    std::mutex m_;
    int me_ = 0;
    ucp_context_h context_ = nullptr;
    ucp_worker_h worker_ = nullptr;
    std::vector<std::string> addresses_;
    std::map<int, ucp_ep_h> eps_;
};

//! A UCX engine over `comm`, for tpipe::mpi::job (collective).
inline std::unique_ptr<tpipe::link_engine> links(MPI_Comm comm) { return std::make_unique<link_engine>(comm); }

inline link::link(link_engine& engine, ucp_ep_h ep, int peer, std::uint64_t stream, int tags)
    : engine_(engine), ep_(ep), peer_(peer), stream_(stream)
{
    reset(tags);
}

inline void link::send(int tag, std::span<const std::byte> header, std::span<const std::byte> body)
{
    send_slot& s = tpipe::detail::slot_at(sends_, tag, [] { return "ucx::link"; });
    std::lock_guard<std::mutex> g(engine_.m_);
    auto isend = [&](std::span<const std::byte> b, int part) -> void* {
        ucp_request_param_t p{};
        void* r = ucp_tag_send_nbx(ep_, b.data(), b.size(), ucp_tag(static_cast<std::uint64_t>(engine_.me_), tag, part), &p);
        if (UCS_PTR_IS_ERR(r)) detail::check(UCS_PTR_STATUS(r), "ucp_tag_send_nbx (payload)");
        return r;  // nullptr: sent already
    };
    s.head = isend(header, 0);
    if (!body.empty()) s.body = isend(body, 1);
    pending_sends_.push_back(tag);
    mpi::detail::begin_outstanding();
}

inline void* link::receive(std::span<std::byte> into, int tag, int part)
{
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // always a request: its length is checked
    void* r = ucp_tag_recv_nbx(engine_.worker_, into.data(), into.size(), ucp_tag(static_cast<std::uint64_t>(peer_), tag, part),
                               ~std::uint64_t{0}, &p);
    if (UCS_PTR_IS_ERR(r)) detail::check(UCS_PTR_STATUS(r), "ucp_tag_recv_nbx (payload)");
    return r;
}

inline void link::post(int tag, std::span<std::byte> header)
{
    recv_slot& s = tpipe::detail::slot_at(recvs_, tag, [] { return "ucx::link"; });
    std::lock_guard<std::mutex> g(engine_.m_);
    s = recv_slot{.head = header};
    s.req = receive(header, tag, 0);
    pending_recvs_.push_back(tag);
    mpi::detail::begin_outstanding();
}

//! True once `req` completed with `bytes` bytes (and frees it); throws on an error or another size.
inline bool link::received(void*& req, std::size_t bytes, int tag, const char* part)
{
    ucp_tag_recv_info_t info{};
    const ucs_status_t st = ucp_tag_recv_request_test(req, &info);
    if (st == UCS_INPROGRESS) return false;
    ucp_request_free(req);
    req = nullptr;
    if (st == UCS_ERR_MESSAGE_TRUNCATED || (st == UCS_OK && info.length != bytes))
        throw tpipe::detail::size_mismatch("ucx::link", part, tag, "process " + std::to_string(peer_),
                                           st == UCS_OK ? std::to_string(info.length) : std::string("more"), bytes);
    detail::check(st, "a payload receive");
    return true;
}

inline bool link::sent(void*& req)
{
    if (!req) return true;
    const ucs_status_t st = ucp_request_check_status(req);
    if (st == UCS_INPROGRESS) return false;
    ucp_request_free(req);
    req = nullptr;
    detail::check(st, "a payload send");
    return true;
}

inline void link::poll(link_events& events, bool waiting)
{
    if (waiting) mpi::detail::note_tested();  // a loop drives progress: MPI's progress thread may rest
    std::unique_lock<std::mutex> g(engine_.m_);
    while (ucp_worker_progress(engine_.worker_) != 0) {
    }
    const auto finish_recv = [&](std::size_t k) {
        pending_recvs_[k] = pending_recvs_.back();
        pending_recvs_.pop_back();
        mpi::detail::end_outstanding();
    };
    for (std::size_t k = 0; k < pending_recvs_.size();) {
        const int tag = pending_recvs_[k];
        recv_slot& s = recvs_[static_cast<std::size_t>(tag)];
        bool done = false;
        try {
            if (!s.body_posted && received(s.req, s.head.size(), tag, "header")) {
                g.unlock();  // place() may reclaim, and make the object: no UCP call
                const std::span<std::byte> body = events.place(tag, s.head);
                g.lock();
                s.body_bytes = body.size();
                s.body_posted = true;
                if (body.empty()) done = true;
                else s.req = receive(body, tag, 1);
            }
            if (!done && s.body_posted && received(s.req, s.body_bytes, tag, "body")) done = true;
        } catch (...) {
            // The failed receive is over and its request freed: the next poll (the loop's, or
            // MPI's progress thread's) must not test it again (CI: a segfault in
            // ucp_tag_recv_request_test after a payload of the wrong size).
            if (!g.owns_lock()) g.lock();
            finish_recv(k);
            throw;
        }
        if (done) {
            events.arrived(tag);
            finish_recv(k);
        } else {
            ++k;
        }
    }
    for (std::size_t k = 0; k < pending_sends_.size();) {
        send_slot& s = sends_[static_cast<std::size_t>(pending_sends_[k])];
        const bool head = sent(s.head), body = sent(s.body);
        if (head && body) {
            events.sent(pending_sends_[k]);
            pending_sends_[k] = pending_sends_.back();
            pending_sends_.pop_back();
            mpi::detail::end_outstanding();
        } else {
            ++k;
        }
    }
}

//! Cancels what an interrupted iteration left posted; its sends complete on their own.
inline void link::abandon() noexcept
{
    std::lock_guard<std::mutex> g(engine_.m_);
    for (int tag : pending_recvs_) {
        void*& r = recvs_[static_cast<std::size_t>(tag)].req;
        if (!r) continue;
        ucp_request_cancel(engine_.worker_, r);
        ucp_request_free(r);
        r = nullptr;
    }
    for (std::size_t i = 0; i < pending_recvs_.size() + pending_sends_.size(); ++i) mpi::detail::end_outstanding();
    pending_recvs_.clear();
    for (int tag : pending_sends_)
        for (void** r : {&sends_[static_cast<std::size_t>(tag)].head, &sends_[static_cast<std::size_t>(tag)].body})
            if (*r) ucp_request_free(*r);
    pending_sends_.clear();
}

} // namespace tpipe::ucx
