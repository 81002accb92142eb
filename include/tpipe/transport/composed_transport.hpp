#pragma once
// tpipe::composed_transport<Between, Within>: one transport made of two. Boundaries between
// processes get Between's channels (MPI, NCCL); boundaries between two ranks of this process get
// Within's (a tpipe::local_connecting_transport such as tpipe::cuda::peer_transport, whose
// device copies join GPUs of one process). So a boundary's channel may differ from its
// neighbour's: with NCCL between processes and peer copies inside them, a process may run
// several GPUs' ranks.
//
//   tpipe::mpi::transport control(w, replica);                     // ranks over processes
//   tpipe::nccl::transport between(control, pool, id);            // NCCL between processes
//   auto within = tpipe::cuda::make_peer_transport(eng, gpus, pools);
//   tpipe::composed_transport x(between, within);
//   tpipe::runner r(pipe, prog, eng, x);
//
// The control plane is Between's: which ranks run here, where the others run, agree() and
// fail(); failure() also reports Within's, and stalled(report) (the runner's watchdog fired) goes
// to both. It carries the payload types Between carries; one that
// Within does not carry moves between two ranks of this process through a tpipe::local_channel,
// as with any transport. Channels are tpipe::any_channel (one virtual call per operation); the
// runner is unchanged. Both transports are referenced, not owned: they outlive this one.
#include <memory>
#include <optional>
#include <string>

#include "tpipe/transport/any_channel.hpp"
#include "tpipe/transport/local_channel.hpp"
#include "tpipe/transport/local_connecting_transport.hpp"
#include "tpipe/transport/transport.hpp"

namespace tpipe {

template <transport Between, transport Within>
class composed_transport {
    static_assert(enable_local_connecting_transport<Within>,
                  "composed_transport: Within must make the channels inside a process (declare "
                  "tpipe_local_connecting_transport and give connect_local); otherwise use Between alone");
    static_assert(!enable_local_connecting_transport<Between>,
                  "composed_transport: Between already makes the channels inside a process; use it alone");

public:
    template <class T>
        requires transport_for<Between, T>
    using channel_type = any_channel<T>;
    static constexpr bool tpipe_local_connecting_transport = true;

    composed_transport(Between& between, Within& within) noexcept : between_(between), within_(within) {}

    bool runs(int rank) const { return between_.runs(rank); }
    std::string where(int rank) const { return between_.where(rank); }
    void agree(const std::string& text) { between_.agree(text); }
    void fail(const std::string& message) { between_.fail(message); }
    std::optional<std::string> failure()
    {
        if (auto f = between_.failure()) return f;
        return within_.failure();
    }
    //! The runner's watchdog fired: both transports hear it (Between's, tpipe::mpi::transport,
    //! reports it and has the environment end the job, since another process may be stopped).
    void stalled(const std::string& report)
    {
        if constexpr (requires { between_.stalled(report); }) between_.stalled(report);
        if constexpr (requires { within_.stalled(report); }) within_.stalled(report);
    }

    //! A boundary whose other end runs in another process: Between's channel.
    template <class T>
        requires transport_for<Between, T>
    std::unique_ptr<any_channel<T>> connect(const endpoint& e)
    {
        return erase_channel(between_.template connect<T>(e));
    }
    //! A boundary with both ends here: Within's channel, or a local_channel if Within does not
    //! carry T.
    template <class T>
        requires transport_for<Between, T>
    std::unique_ptr<any_channel<T>> connect_local(const endpoint& e)
    {
        if constexpr (local_connecting_transport<Within, T>) return erase_channel(within_.template connect_local<T>(e));
        else return erase_channel(std::make_unique<local_channel<T>>());
    }

    Between& between() noexcept { return between_; }
    Within& within() noexcept { return within_; }

private:
    Between& between_;
    Within& within_;
};

} // namespace tpipe
