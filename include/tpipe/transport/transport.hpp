#pragma once
// The transport concept: which pipeline ranks this process runs (SPMD: every process builds the
// same program and the same pipeline, and runs only its own ranks) and what processes must agree
// on (the control plane), and, per payload type, where a boundary between this process and
// another gets its channels (the channel factory). The runner asks the transport for a channel
// (connect) when one of a boundary's ranks runs elsewhere, and needs no channel when neither
// does. When both run here it uses a local_channel (the payload moves), unless the transport is
// a tpipe::link_transport that joins them by a link (open_within: a copy between two GPUs of
// this process). Models: tpipe::local_transport (every rank here: it makes no channel), and the
// link transports (tpipe/transport/link_transport.hpp): tpipe::all_here, tpipe::mpi::transport,
// tpipe::nccl::transport, tpipe::cuda::peer_transport and tpipe::composed_transport.
//
// The channel factory is per payload type: transport_for<X, T> holds when X::channel_type<T>
// names a channel and connect<T>(endpoint) makes one. A transport that cannot carry a type (MPI
// without tpipe::payload_traits<T>, NCCL without device_payload_traits<T>) leaves
// channel_type<T> undefined (a constrained alias); the runner then refuses, before the first
// iteration, only a boundary of that type that would need the transport's channel. The last
// stage's output never travels: it needs no channel.
//
// Besides channels, a transport carries what processes must agree on:
// - agree(fingerprint): a collective at runner construction; every process passes a text
//   describing its configuration (program, stage count, payload types...). If they differ,
//   every process throws the same tpipe::invalid_argument, before the first iteration.
// - fail(message): this process's iteration failed (a stage threw, the watchdog fired); the
//   transport tells the other processes, whose runners poll failure() while they wait and stop
//   with an error naming where it happened instead of waiting for the watchdog.
// - stalled(report) (optional): the runner's watchdog fired (`report` is its watchdog_error's
//   text), so another process may be stopped and will never finish the job with this one
//   (tpipe::mpi::transport writes the report to stderr, and the environment then ends the job
//   with MPI_Abort instead of waiting for it in MPI_Finalize).
#include <concepts>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/transport/local_channel.hpp"

namespace tpipe {

//! One direction of one stage boundary, as seen by the process that connects it.
struct endpoint {
    int boundary = 0;     //!< between stage `boundary` and stage `boundary + 1`
    bool forward = true;  //!< activations (stage b to b+1) or gradients (b+1 to b)
    int from_rank = 0;    //!< pipeline rank that sends
    int to_rank = 0;      //!< pipeline rank that receives
    bool sending = true;  //!< this process holds the sending end (else the receiving end)
    int tags = 0;         //!< messages per iteration: tags [0, tags)
};

//! The control plane: which ranks run here, where the others run, agreement and failure notices.
template <class X>
concept transport = requires(X& x, const X& cx, int rank, const std::string& text) {
    { cx.runs(rank) } -> std::convertible_to<bool>;
    x.agree(text);
    x.fail(text);
    { x.failure() } -> std::same_as<std::optional<std::string>>;
    { cx.where(rank) } -> std::convertible_to<std::string>;
};

//! Whether X's channel_type<T> names a channel of T (X carries payloads of type T).
template <class X, class T>
concept has_channel_type_for = payload<T> && requires { typename X::template channel_type<T>; } &&
                               channel<typename X::template channel_type<T>>;

//! The channel factory of a transport for payloads of type T: X::channel_type<T> is a channel of
//! T and connect<T>(endpoint) makes the channel of one direction of a boundary whose other end
//! runs in another process.
template <class X, class T>
concept transport_for = transport<X> && has_channel_type_for<X, T> && requires(X& x, const endpoint& e) {
                            { x.template connect<T>(e) } -> std::same_as<std::unique_ptr<typename X::template channel_type<T>>>;
                        };

namespace detail {
//! True; a compile error naming connect when X's channel_type<T> names a channel but X cannot
//! connect it.
template <class X, class T>
consteval bool check_transport_for()
{
    if constexpr (has_channel_type_for<X, T>)
        static_assert(requires(X& x, const endpoint& e) {
            { x.template connect<T>(e) } -> std::same_as<std::unique_ptr<typename X::template channel_type<T>>>;
        }, "this transport's channel_type<T> names a channel, so it must have `template <class T> "
           "std::unique_ptr<channel_type<T>> connect(const tpipe::endpoint&)`");
    return true;
}
} // namespace detail

//! Every rank in this process: every boundary is a local_channel.
class local_transport {
public:
    bool runs(int) const noexcept { return true; }
    void agree(const std::string&) const noexcept {}
    void fail(const std::string&) const noexcept {}
    std::optional<std::string> failure() const noexcept { return std::nullopt; }
    std::string where(int) const { return {}; }
};
static_assert(transport<local_transport>);
static_assert(!transport_for<local_transport, int>, "local_transport makes no channel: no boundary leaves the process");

} // namespace tpipe
