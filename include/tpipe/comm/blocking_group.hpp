#pragma once
// tpipe::blocking_group: a communicator's all-reduce for code that cannot co_await it. A stage
// functor is synchronous (tpipe::stage), yet a stage whose layers are split over a tensor group
// sums its partial results in the middle of its forward and its backward (Megatron's
// row-parallel layers). sync_wait may not run inside the stage's loop, so each call hands the
// collective to a thread the group starts once, which runs it on a private loop, and blocks the
// caller until it ends (no thread per call).
//
//   tpipe::blocking_group<tpipe::mpi::communicator> tensor(job.tensor());
//   tensor.all_reduce_sum(std::span<float>(partial));   // inside a stage's forward
//
// Every member must call the same collectives in the same order, as with the communicator. A
// member that blocks here holds its loop: give each tensor rank of a process a loop of its own
// (docs/runtime.md). The sum's bits are the communicator's (the same on every member).
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>

#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/reduce_scatter_communicator.hpp"

namespace tpipe {

template <communicator Comm>
class blocking_group {
public:
    explicit blocking_group(Comm& c) : comm_(&c), worker_([this] { serve(); }) {}
    ~blocking_group()
    {
        {
            std::lock_guard lock(mutex_);
            closing_ = true;
        }
        wake_.notify_all();
        worker_.join();
    }
    blocking_group(const blocking_group&) = delete;
    blocking_group& operator=(const blocking_group&) = delete;

    int size() const { return comm_->size(); }
    int rank() const { return comm_->rank(); }
    Comm& communicator() { return *comm_; }

    //! The sum of `values` over the group, in place; returns when it is done here. Rethrows what
    //! the collective threw (a stop, a watchdog's report, a size mismatch).
    template <reducible T>
    void all_reduce_sum(std::span<T> values)
    {
        call([this, values]() -> task<void> { co_await comm_->all_reduce_sum(values); });
    }

    //! Member r's ring segment r of `values` (tpipe::ring_segment) becomes the group's sum of it,
    //! in the ring order; the other segments are left unspecified. For communicators that can
    //! (tpipe::reduce_scatter_communicator).
    template <reducible T>
    void reduce_scatter_sum(std::span<T> values)
        requires reduce_scatter_communicator<Comm>
    {
        call([this, values]() -> task<void> { co_await comm_->reduce_scatter_sum(values); });
    }

    //! Every member's ring segment s of `values` (tpipe::ring_segment) copied into segment s
    //! everywhere, in place; for communicators that can (tpipe::reduce_scatter_communicator).
    template <reducible T>
    void all_gather(std::span<T> values)
        requires reduce_scatter_communicator<Comm>
    {
        call([this, values]() -> task<void> { co_await comm_->all_gather(values); });
    }

private:
    void call(std::function<task<void>()> job)
    {
        std::unique_lock lock(mutex_);
        job_ = std::move(job);
        error_ = nullptr;
        done_ = false;
        wake_.notify_all();
        wake_.wait(lock, [this] { return done_; });
        if (error_) std::rethrow_exception(error_);
    }
    void serve()
    {
        std::unique_lock lock(mutex_);
        for (;;) {
            wake_.wait(lock, [this] { return closing_ || job_; });
            if (!job_) return;  // closing, nothing left to run
            auto job = std::move(job_);
            job_ = nullptr;
            lock.unlock();
            std::exception_ptr error;
            try {
                sync_wait(job());
            } catch (...) {
                error = std::current_exception();
            }
            lock.lock();
            error_ = error;
            done_ = true;
            wake_.notify_all();
        }
    }

    Comm* comm_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::function<task<void>()> job_;
    std::exception_ptr error_;
    bool done_ = false, closing_ = false;
    std::thread worker_;  // last: it starts once the rest is built
};

} // namespace tpipe
