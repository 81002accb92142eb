#pragma once
// tpipe::mpi::driven_link: the base of a byte link (tpipe/transport/link.hpp) that
// tpipe::mpi::progress_thread drives while the loops compute: drive(p) registers a progress hook
// that advances the link's channel from the thread, so that a rendezvous-sized body moves while
// its receiver computes. Models: tpipe::mpi::link, tpipe::ucx::link. A derived link counts each
// pending request in detail::outstanding() (it wakes the thread) and calls detail::note_tested()
// when a loop polls it (the thread may rest), and its destructor calls stop_driving() before it
// frees its requests.
#include "tpipe/mpi/progress.hpp"
#include "tpipe/transport/link.hpp"

namespace tpipe::mpi {

class driven_link : public tpipe::link, private detail::progress_hook {
public:
    void drive(link_progress* p) override
    {
        if (p == driven_) return;
        if (driven_) detail::remove_progress_hook(this);
        driven_ = p;
        if (driven_) detail::add_progress_hook(this);
    }

    //! The other links' finished sends give their bodies back to the payload pool first, so
    //! that this body can be one of them: a sending link is otherwise reaped only by its own
    //! drain or the progress thread, and a ping-pong would allocate, zero-fill and page-fault a
    //! fresh body per message (hooks only try-lock: no deadlock).
    void reclaim() noexcept override { detail::run_progress_hooks(this); }

protected:
    //! After it returns, the progress thread no longer calls this link.
    void stop_driving() noexcept
    {
        if (driven_) detail::remove_progress_hook(this);
        driven_ = nullptr;
    }

private:
    void progress() noexcept override { driven_->advance(); }

    link_progress* driven_ = nullptr;
};

} // namespace tpipe::mpi
