#pragma once
// tpipe::composed_transport: one link transport made of two, a choice of link per boundary.
// Boundaries between processes get the links of `between` (MPI, UCX, NCCL); boundaries between
// two ranks of this process get those of `within` (tpipe::cuda::peer_transport: copies between
// its GPUs), or move their payload where `within` opens none. So a process may run several GPUs'
// ranks, with NCCL between processes and peer copies inside them:
//
//   tpipe::mpi::transport control(w, replica);                     // ranks over processes
//   tpipe::nccl::transport between(control, pool, id);            // NCCL between processes
//   auto within = tpipe::cuda::make_peer_transport(eng, gpus, pools);
//   tpipe::composed_transport x(between, within);
//   tpipe::runner r(pipe, prog, eng, x);                           // tpipe::runner<Pipe, E>
//
// Every channel is the one typed channel, tpipe::linked_channel, over whichever link the boundary
// got, so the runner is the one of any other transport. The control plane is between's: which
// ranks run here, where the others run, agree() and fail(); failure() also reports within's, and
// stalled(report) (the runner's watchdog fired) goes to both. Both transports are referenced,
// not owned: they outlive this one.
#include <memory>
#include <optional>
#include <string>

#include "tpipe/transport/link_transport.hpp"

namespace tpipe {

class composed_transport final : public link_transport {
public:
    composed_transport(link_transport& between, link_transport& within) noexcept : between_(between), within_(within) {}

    bool runs(int rank) const override { return between_.runs(rank); }
    std::string where(int rank) const override { return between_.where(rank); }
    void agree(const std::string& text) override { between_.agree(text); }
    void fail(const std::string& message) override { between_.fail(message); }
    std::optional<std::string> failure() override
    {
        if (auto f = between_.failure()) return f;
        return within_.failure();
    }
    //! The runner's watchdog fired: both transports hear it (tpipe::mpi::transport reports it and
    //! has the environment end the job, since another process may be stopped).
    void stalled(const std::string& report) noexcept override
    {
        between_.stalled(report);
        within_.stalled(report);
    }
    //! A boundary with both ends here: within's link, or none (the payload moves).
    std::unique_ptr<link> open_within(const endpoint& e) override { return within_.open_within(e); }

    link_transport& between() noexcept { return between_; }
    link_transport& within() noexcept { return within_; }

protected:
    //! A boundary whose other end runs in another process: between's link.
    std::unique_ptr<link> open(const endpoint& e) override { return open_of(between_, e); }

private:
    link_transport& between_;
    link_transport& within_;
};

} // namespace tpipe
