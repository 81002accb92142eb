#pragma once
// tpipe::link_transport: the one transport type of the runner. Its control plane is virtual (runs,
// where, agree, fail, failure, stalled), and every boundary's channel is a tpipe::linked_channel<T>
// over a byte link (tpipe/transport/link.hpp), or a local channel:
// - a boundary that crosses processes: the link that open(endpoint) gives;
// - a boundary whose two ranks both run here: the link that open_within(endpoint) gives (a copy
//   between two GPUs of this process), or, where it gives none, a tpipe::local_channel (the
//   payload moves).
// Models: tpipe::all_here (every rank in this process: it opens no link),
// tpipe::mpi::transport (links of any engine: MPI's, UCX's), tpipe::nccl::transport (device
// payloads over NCCL), tpipe::cuda::peer_transport (copies between the GPUs of one process) and
// tpipe::composed_transport (one between processes, another within each). So
//
//   tpipe::runner r(pipe, prog, engine);                   // threads
//   tpipe::runner r(pipe, prog, engine, job.transport());  // MPI processes, payloads over MPI or UCX
//   tpipe::runner r(pipe, prog, engine, nccl_transport);   // one GPU per process, over NCCL
//   tpipe::runner r(pipe, prog, engine, peers);            // GPUs of one process, peer copies
//
// are the same type, tpipe::runner<Pipe, E> (a deduction guide maps every model to
// link_transport), and a trainer holds one runner type whatever it runs over.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpipe/transport/link.hpp"
#include "tpipe/transport/linked_channel.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/transport/transport.hpp"

namespace tpipe {

class link_transport {
public:
    //! Carries payloads with a byte form (tpipe::payload_traits) or a device form that names its
    //! pool (tpipe::device_payload_traits); the runner refuses a boundary between processes of
    //! any other type, and a channel refuses a link of the memory its type has no form for.
    template <class T>
        requires byte_payload<T> || pooled_device_payload<T>
    using channel_type = linked_channel<T>;

    virtual ~link_transport() = default;

    //! Whether pipeline rank `rank` runs in this process.
    virtual bool runs(int rank) const = 0;
    //! Where rank `rank` runs, for messages ("on process 3"; empty when here).
    virtual std::string where(int rank) const = 0;
    //! Collective: every process passes its configuration; all throw the same error if they differ.
    virtual void agree(const std::string& text) = 0;
    //! Tells the other processes that this one's iteration failed (never blocks).
    virtual void fail(const std::string& message) = 0;
    //! A failure notice from another process, if one has arrived.
    virtual std::optional<std::string> failure() = 0;
    //! The runner's watchdog fired with `report` (another process may be stopped).
    virtual void stalled(const std::string& report) noexcept { (void)report; }

    //! The channel of one direction of a boundary whose other end runs in another process.
    template <class T>
        requires byte_payload<T> || pooled_device_payload<T>
    std::unique_ptr<linked_channel<T>> connect(const endpoint& e)
    {
        return std::make_unique<linked_channel<T>>(open(e), e.sending ? channel_end::sender : channel_end::receiver, e.tags);
    }

    //! One direction of a boundary whose two ranks both run here: the link that joins them (its
    //! channel holds both ends, channel_end::both), or nullptr where the payload simply moves
    //! (a local channel: the default).
    virtual std::unique_ptr<link> open_within(const endpoint& e)
    {
        (void)e;
        return nullptr;
    }

protected:
    link_transport() = default;
    link_transport(const link_transport&) = default;
    link_transport& operator=(const link_transport&) = default;

    //! The byte link of one direction of a boundary with another process.
    virtual std::unique_ptr<link> open(const endpoint& e) = 0;
    //! x.open(e), for a transport made of others (tpipe::composed_transport).
    static std::unique_ptr<link> open_of(link_transport& x, const endpoint& e) { return x.open(e); }
};

//! Every rank in this process: the runner's default transport; no boundary leaves the process.
//! A transport that joins ranks of this process by links (tpipe::cuda::peer_transport) derives
//! from it and gives open_within.
class all_here : public link_transport {
public:
    bool runs(int) const override { return true; }
    std::string where(int) const override { return {}; }
    void agree(const std::string&) override {}
    void fail(const std::string&) override {}
    std::optional<std::string> failure() override { return std::nullopt; }

protected:
    std::unique_ptr<link> open(const endpoint&) override
    {
        throw error("tpipe::all_here: every rank runs in this process, so no boundary leaves it");
    }
};

static_assert(transport<link_transport> && transport_for<link_transport, std::vector<float>> && !transport_for<link_transport, int>);

} // namespace tpipe
