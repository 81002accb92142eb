#pragma once
// detail::transport_core<Api>: what the channels of one tpipe::nccl::basic_transport share: the
// two NCCL communicators and their streams, the receive lanes, one lock for every NCCL call
// (NCCL calls on a communicator must not run concurrently), and the first failure.
//
// Two communicators over the same processes: `up` carries the messages from a lower process
// index to a higher one, `down` the others. NCCL runs a communicator's launches one after
// another, so on one communicator a receive that waits (for a peer still computing) would hold
// back this process's sends in the other direction; with one communicator per direction, the
// sends towards the last stage never wait behind receives from it, and the reverse.
#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "tpipe/core/error.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/detail/receive_lane.hpp"
#include "tpipe/nccl/nccl_error.hpp"

namespace tpipe::nccl::detail {

template <api Api>
struct transport_core {
    using comm_t = typename Api::comm_t;
    using stream_t = typename Api::stream_t;

    struct direction {
        comm_t comm{};
        stream_t stream{};
    };

    Api api;
    int me = 0, processes = 1;
    direction up, down;
    std::mutex m;
    std::map<std::pair<bool, int>, std::unique_ptr<receive_lane<Api>>> lanes;  //!< (up?, peer)
    std::exception_ptr failure;  //!< under m
    bool aborted = false;        //!< under m
    bool poisoned = false;       //!< a transfer was abandoned: abort at the end (under m)

    //! The communicator and stream for messages between this process and `peer`.
    direction& towards(int peer, bool sending) noexcept
    {
        const bool to_higher = sending ? peer > me : peer < me;  // the direction the message moves
        return to_higher ? up : down;
    }

    receive_lane<Api>& lane(int peer)
    {
        direction& d = towards(peer, false);
        auto& l = lanes[{&d == &up, peer}];
        if (!l) l = std::make_unique<receive_lane<Api>>(api, d.comm, d.stream, peer, me);
        return *l;
    }

    //! Polls both communicators for asynchronous errors; on one, aborts both and records it.
    void check_health()
    {
        if (failure) return;
        for (direction* d : {&up, &down}) {
            const int rc = api.async_error(d->comm);
            if (rc == 0) continue;
            fail(std::make_exception_ptr(nccl_error("tpipe::nccl::transport: process " + std::to_string(me) +
                                                        ": asynchronous NCCL error: " + std::string(api.describe(rc, d->comm)),
                                                    rc)));
            return;
        }
    }

    //! Records the first failure and aborts the communicators (nothing will complete after it).
    void fail(std::exception_ptr e) noexcept
    {
        if (!failure) failure = std::move(e);
        abort();
    }

    void abort() noexcept
    {
        if (aborted) return;
        aborted = true;
        api.abort(up.comm);
        api.abort(down.comm);
    }

    //! Before buffers go: waits until both streams ran what was enqueued on them (envelope copies
    //! and NCCL kernels write the buffers). Aborted kernels end, so after abort() this is
    //! bounded; work that does not end within `limit` is aborted first.
    void quiesce(std::chrono::milliseconds limit = std::chrono::seconds(10)) noexcept
    {
        const auto drained = [&](std::chrono::steady_clock::duration d) { return api.drain(up.stream, d) && api.drain(down.stream, d); };
        if (!drained(limit)) {
            abort();
            (void)drained(std::chrono::steady_clock::duration::max());
        }
    }

    void rethrow_failure() const
    {
        if (failure) std::rethrow_exception(failure);
    }
};

} // namespace tpipe::nccl::detail
