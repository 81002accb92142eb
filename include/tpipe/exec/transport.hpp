#pragma once
// The transport concept: where each stage boundary gets its channels from, and which pipeline
// ranks this process runs (SPMD: every process builds the same program and the same pipeline,
// and runs only its own ranks). The runner asks the transport for a channel (connect) when one
// of a boundary's ranks runs elsewhere, and needs no channel when neither does. When both run
// here it uses a local_channel (the payload moves), unless the transport has
//   template <class T> std::unique_ptr<channel_type<T>> connect_local(const endpoint&);
// (optional; endpoint::sending is true, the channel has both ends): then it uses that channel,
// e.g. tpipe::cuda::peer_transport's device copies between GPUs of one process. Models:
// tpipe::local_transport (every rank here), tpipe::mpi::transport (ranks spread over MPI
// processes), tpipe::nccl::transport (over NCCL), tpipe::cuda::peer_transport (GPUs of one process).
//
// Besides channels, a transport carries what processes must agree on:
// - agree(fingerprint): a collective at runner construction; every process passes a text
//   describing its configuration (program, stage count, payload types...). If they differ,
//   every process throws the same tpipe::invalid_argument, before the first iteration.
// - fail(message): this process's iteration failed (a stage threw, the watchdog fired); the
//   transport tells the other processes, whose runners poll failure() while they wait and stop
//   with an error naming where it happened instead of waiting for the watchdog.
#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/channel.hpp"
#include "tpipe/exec/local_channel.hpp"

namespace tpipe {

//! One direction of one stage boundary, as seen by the process that connects it.
struct endpoint {
    int boundary = 0;     //!< between stage `boundary` and stage `boundary + 1`
    bool forward = true;  //!< activations (stage b to b+1) or gradients (b+1 to b)
    int from_rank = 0;    //!< pipeline rank that sends
    int to_rank = 0;      //!< pipeline rank that receives
    bool sending = true;  //!< this process holds the sending end (else the receiving end)
    int tags = 0;         //!< messages per iteration: tags [0, tags)
    int boundaries = 0;   //!< boundaries of the pipeline (to make tags unique per boundary)
};

namespace detail {
using transport_probe = std::vector<int>;
} // namespace detail

template <class X>
concept transport =
    requires { typename X::template channel_type<detail::transport_probe>; } &&
    channel<typename X::template channel_type<detail::transport_probe>> &&
    requires(X& x, const X& cx, int rank, const endpoint& e, const std::string& text) {
        { cx.runs(rank) } -> std::convertible_to<bool>;
        { x.template connect<detail::transport_probe>(e) }
            -> std::same_as<std::unique_ptr<typename X::template channel_type<detail::transport_probe>>>;
        x.agree(text);
        x.fail(text);
        { x.failure() } -> std::same_as<std::optional<std::string>>;
        { cx.where(rank) } -> std::convertible_to<std::string>;
    };

//! Every rank in this process: every boundary is a local_channel.
class local_transport {
public:
    template <payload T>
    using channel_type = local_channel<T>;

    bool runs(int) const noexcept { return true; }
    template <payload T>
    std::unique_ptr<local_channel<T>> connect(const endpoint&)
    {
        throw error("local_transport: every rank runs in this process, so no boundary needs a remote channel");
    }
    void agree(const std::string&) const noexcept {}
    void fail(const std::string&) const noexcept {}
    std::optional<std::string> failure() const noexcept { return std::nullopt; }
    std::string where(int) const { return {}; }
};
static_assert(transport<local_transport>);

} // namespace tpipe
