#pragma once
// tpipe::mpi::transport: a tpipe::link_transport whose ranks are spread over MPI processes, as a
// tpipe::layout lays them out; one transport carries one pipeline (one replica, one tensor rank).
// Boundaries between ranks of different processes get a tpipe::linked_channel over a byte link
// (tpipe/transport/link.hpp) of the transport's link engine: MPI's own (tpipe::mpi::link) by
// default, or another engine's (tpipe::ucx::link_engine, tpipe/ucx/link.hpp). Boundaries inside
// a process stay local (the runner decides). MPI carries the control plane either way: the
// layout, the agreement and the failure notices.
//
//   tpipe::mpi::environment env(argc, argv);                       // MPI_THREAD_MULTIPLE
//   auto l = tpipe::layout::one_rank_per_process(P, D);           // rank r of replica d on d*P + r
//   tpipe::mpi::transport x(l, replica);                          // collective over MPI_COMM_WORLD
//   (tpipe::mpi::job, tpipe/mpi/job.hpp, builds the layout, this and every group's communicator)
//   tpipe::runner r(pipe, prog, engine, x);                       // same pipeline and program everywhere
//
// Construction is collective over `comm` (every process constructs its transports in the same
// order) and refuses a job whose size is not the layout's process count, with the same message
// on every process. agree() (called by the runner) compares the processes' configurations.
// Both, like every set-up collective, are bounded by environment_options::watchdog
// (tpipe/mpi/setup_watch.hpp).
// fail() tells every other process that this one's iteration failed; failure() polls for that.
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/transport.hpp"
#include "tpipe/exec/layout.hpp"
#include "tpipe/mpi/agree.hpp"
#include "tpipe/mpi/link.hpp"
#include "tpipe/transport/link_transport.hpp"
#include "tpipe/mpi/mpi_error.hpp"
#include "tpipe/mpi/setup_watch.hpp"
#include "tpipe/mpi/stall_watch.hpp"

namespace tpipe::mpi {

class transport final : public tpipe::link_transport {
public:
    //! The pipeline of replica `replica` (tensor rank 0) of layout `l` over the processes of
    //! `comm` (duplicated: tpipe's messages never meet the application's).
    transport(const tpipe::layout& l, int replica, MPI_Comm comm = MPI_COMM_WORLD)
        : transport(l, pipeline_id{.replica = replica, .tensor_rank = 0}, comm)
    {
    }
    //! The pipeline of (p.replica, p.tensor_rank): its rank r talks to the process of rank r + 1
    //! of the same replica and tensor rank. Payloads travel over `links` when given (an engine
    //! made over the same processes, which must outlive the transport), else over MPI.
    transport(const tpipe::layout& l, pipeline_id p, MPI_Comm comm = MPI_COMM_WORLD, tpipe::link_engine* links = nullptr)
        : layout_(l), replica_(p.replica), tensor_rank_(p.tensor_rank)
    {
        check(MPI_Comm_rank(comm, &me_), "MPI_Comm_rank");
        check(MPI_Comm_size(comm, &size_), "MPI_Comm_size");
        // First, the layout: processes that disagree on it would otherwise refuse the job on some
        // processes only and leave the others waiting in the next collective.
        mpi::agree(comm, fingerprint().add("tensor ranks", l.tensor_ranks()).add("pipeline ranks", l.pipeline_ranks())
                             .add("replicas", l.replicas()).add("processes", l.processes())
                             .add("payload link engine", links ? links->name() : "MPI")  // else no message would match
                             .text(), "mpi::transport",
                   "tpipe::mpi::transport (the layout agreement)");
        if (size_ != l.processes())
            throw invalid_argument("mpi::transport: the job has " + std::to_string(size_) + " processes, but the layout (" +
                                   l.sizes().text() + ") is laid out over " + std::to_string(l.processes()) +
                                   "; launch it with mpirun -np " + std::to_string(l.processes()));
        if (p.replica < 0 || p.replica >= l.replicas())
            throw invalid_argument("mpi::transport: replica " + std::to_string(p.replica) + " is outside [0, " +
                                   std::to_string(l.replicas()) + ")");
        if (p.tensor_rank < 0 || p.tensor_rank >= l.tensor_ranks())
            throw invalid_argument("mpi::transport: tensor rank " + std::to_string(p.tensor_rank) + " is outside [0, " +
                                   std::to_string(l.tensor_ranks()) + ")");
        data_ = detail::setup_dup(comm, "tpipe::mpi::transport (MPI_Comm_dup, pipeline payloads)");
        control_ = detail::setup_dup(comm, "tpipe::mpi::transport (MPI_Comm_dup, failure notices)");
        MPI_Comm_set_errhandler(data_, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN);
        if (!links) own_links_ = std::make_unique<mpi::link_engine>(data_);
        links_ = links ? links : own_links_.get();
    }
    transport(const transport&) = delete;
    transport& operator=(const transport&) = delete;
    ~transport()
    {
        own_links_.reset();
        for (MPI_Request& r : notices_) MPI_Request_free(&r);
        MPI_Comm_free(&control_);
        MPI_Comm_free(&data_);
    }

    int process() const noexcept { return me_; }
    int replica() const noexcept { return replica_; }
    int tensor_rank() const noexcept { return tensor_rank_; }
    const tpipe::layout& layout() const noexcept { return layout_; }

    bool runs(int rank) const override { return layout_.process_of(replica_, rank, tensor_rank_) == me_; }

    std::string where(int rank) const override
    {
        const int p = layout_.process_of(replica_, rank, tensor_rank_);
        return p == me_ ? std::string() : "on process " + std::to_string(p);
    }

    //! The engine payloads travel over ("MPI", "UCX").
    const tpipe::link_engine& links() const noexcept { return *links_; }

    //! Collective: every process passes its configuration; all throw the same error if they differ
    //! (tpipe/mpi/agree.hpp: naming the first differing field and the processes on each side).
    void agree(const std::string& text) override
    {
        mpi::agree(control_, text, "mpi::transport", "tpipe::mpi::transport::agree (the runner's program)");
    }

    //! Runs `call()`, a blocking set-up step that every process of the job makes together (a
    //! transport built on this one as its control plane: tpipe::nccl::transport's
    //! ncclCommInitRank), under the environment's set-up bound: a process that never arrives is
    //! named instead of waited for (setup_bound: `call` may run on a thread of its own).
    template <class Call>
    auto bounded_setup(const char* what, Call call)
    {
        return setup_bound{}.bounded_setup(what, std::move(call));
    }

    //! Tells every other process that this one's iteration failed (never blocks).
    void fail(const std::string& message) override
    {
        notice_ = "process " + std::to_string(me_) + " (replica " + std::to_string(replica_) +
                  (layout_.tensor_ranks() > 1 ? ", tensor rank " + std::to_string(tensor_rank_) : std::string()) + "): " + message;
        for (int p = 0; p < size_; ++p) {
            if (p == me_) continue;
            MPI_Request r = MPI_REQUEST_NULL;
            if (MPI_Isend(notice_.data(), static_cast<int>(notice_.size()), MPI_CHAR, p, notice_tag, control_, &r) ==
                MPI_SUCCESS)
                notices_.push_back(r);
        }
    }

    //! The runner's watchdog fired: a process may be stopped (SIGSTOP, a hung node), so the job
    //! ends with MPI_Abort when tpipe::mpi::environment goes (MPI_Finalize would wait for it).
    //! The report goes to stderr now: the abort may come before anyone prints the exception.
    void stalled(const std::string& report) noexcept override
    {
        detail::member_stalled().store(true, std::memory_order_relaxed);
        std::fprintf(stderr, "process %d (replica %d): %s\n", me_, replica_, report.c_str());
        std::fflush(stderr);
    }

    //! A failure notice from another process, if one has arrived.
    std::optional<std::string> failure() override
    {
        int flag = 0;
        MPI_Status st{};
        check(MPI_Iprobe(MPI_ANY_SOURCE, notice_tag, control_, &flag, &st), "MPI_Iprobe (failure notices)");
        if (!flag) return std::nullopt;
        int n = 0;
        check(MPI_Get_count(&st, MPI_CHAR, &n), "MPI_Get_count");
        std::string text(static_cast<std::size_t>(n), '\0');
        check(MPI_Recv(text.data(), n, MPI_CHAR, st.MPI_SOURCE, notice_tag, control_, MPI_STATUS_IGNORE),
              "MPI_Recv (failure notice)");
        return "the iteration failed on " + text;
    }

private:
    static constexpr int notice_tag = 1;

    //! The link to the process that runs the other end of `e`, from the transport's engine.
    std::unique_ptr<tpipe::link> open(const endpoint& e) override
    {
        return links_->open(e, layout_.process_of(replica_, e.sending ? e.to_rank : e.from_rank, tensor_rank_));
    }

    tpipe::layout layout_;
    int replica_ = 0, tensor_rank_ = 0;
    int me_ = 0, size_ = 1;
    MPI_Comm data_ = MPI_COMM_NULL, control_ = MPI_COMM_NULL;
    std::string notice_;
    std::vector<MPI_Request> notices_;
    std::unique_ptr<tpipe::link_engine> own_links_;
    tpipe::link_engine* links_ = nullptr;
};
static_assert(tpipe::transport<transport>);
static_assert(tpipe::transport_for<transport, std::vector<float>> && !tpipe::transport_for<transport, int>);

} // namespace tpipe::mpi
