#pragma once
// tpipe::mpi::job: what a process under mpirun needs for a job of t tensor ranks x K pipeline
// ranks x d replicas, in one call: the layout, the transport, and the communicators of this
// process's tensor group, data group and pipeline.
//
//   tpipe::mpi::environment env(argc, argv);
//   tpipe::mpi::job job({.tensor_ranks = 2, .pipeline_ranks = 4});  // mpirun -np 8
//   tpipe::runner r(pipe, prog, engine, job.transport());          // same pipe and prog everywhere
//   job.where();                                                    // this process's (replica, rank, tensor rank)
//   co_await job.tensor().all_reduce_sum(partial);                  // a row-parallel layer's sum
//
// Launched as t * K * d processes, process p runs coordinate layout().at(p) (Megatron's order,
// tpipe::layout::one_rank_per_process). Launched as one process, it runs every coordinate on
// its threads (tpipe::layout::single_process) with one transport per pipeline; the groups then
// live inside the process (tpipe::split_groups over a tpipe::thread_group), so tensor(), data()
// and pipeline(), which connect processes, are refused. Any other count is refused on every
// process alike, naming the three sizes and the mpirun -np to use. Construction is collective
// over `parent`. Payloads cross processes over MPI, or over the engine that `links` makes for each
// transport (job(axes, MPI_COMM_WORLD, tpipe::ucx::links): tpipe/ucx/link.hpp).
#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/group_communicators.hpp"
#include "tpipe/exec/layout.hpp"
#include "tpipe/mpi/communicator.hpp"
#include "tpipe/mpi/transport.hpp"

namespace tpipe::mpi {

class job {
public:
    explicit job(tpipe::axes a, MPI_Comm parent = MPI_COMM_WORLD, const link_maker& links = {})
        : all_(parent), layout_(placed(a, all_.size()))
    {
        if (single_process()) {
            for (int d = 0; d < a.replicas; ++d)
                for (int k = 0; k < a.tensor_ranks; ++k)
                    transports_.push_back(std::make_unique<mpi::transport>(layout_, pipeline_id{d, k}, all_.native()));
            return;
        }
        where_ = layout_.at(all_.rank());
        if (links) links_ = links(all_.native());
        transports_.push_back(std::make_unique<mpi::transport>(layout_, pipeline_id{where_->replica, where_->tensor_rank},
                                                               all_.native(), links_.get()));
        groups_.emplace(split_groups(all_, layout_, *where_));
    }
    job(const job&) = delete;
    job& operator=(const job&) = delete;

    const tpipe::layout& layout() const noexcept { return layout_; }
    //! This process's number in the parent communicator.
    int process() const noexcept { return all_.rank(); }
    //! Launched as one process: every coordinate runs here, on threads.
    bool single_process() const noexcept { return all_.size() == 1 && layout_.sizes().size() > 1; }

    //! The coordinate this process runs (one per process).
    coordinate where() const
    {
        refuse_single("where()", "runs every coordinate");
        return *where_;
    }

    //! The transport of this process's pipeline.
    mpi::transport& transport()
    {
        if (transports_.size() > 1)
            throw invalid_argument("mpi::job::transport(): this process runs " + std::to_string(transports_.size()) +
                                   " pipelines (" + layout_.sizes().text() +
                                   " on its threads); name one with transport({.replica = d, .tensor_rank = k})");
        return *transports_.front();
    }
    //! The transport of pipeline `p`, which has ranks on this process.
    mpi::transport& transport(pipeline_id p)
    {
        for (auto& x : transports_)
            if (x->replica() == p.replica && x->tensor_rank() == p.tensor_rank) return *x;
        throw invalid_argument("mpi::job::transport: the pipeline of replica " + std::to_string(p.replica) + " and tensor rank " +
                               std::to_string(p.tensor_rank) + " has no rank on process " + std::to_string(process()) +
                               " of the layout " + layout_.sizes().text());
    }

    //! Every process of the job (a duplicate of the parent).
    communicator& all() noexcept { return all_; }
    //! The processes of this process's tensor group (the tensor ranks of its replica and rank), by tensor rank.
    communicator& tensor() { return groups("tensor()").tensor; }
    //! The processes of this process's data group (the replicas of its rank and tensor rank), by replica.
    communicator& data() { return groups("data()").data; }
    //! The processes of this process's pipeline (the ranks of its replica and tensor rank), by rank.
    communicator& pipeline() { return groups("pipeline()").pipeline; }

    //! Bounds every collective of the job's communicators (all() and this process's groups) by
    //! `bound` (communicator::set_watchdog): one that makes no progress for `bound` fails with
    //! tpipe::watchdog_error naming each silent process by its coordinate, "process 3 (replica 0,
    //! rank 1, tensor rank 1)". Collective: every process calls it with the same bound. 0: none.
    void set_watchdog(std::chrono::milliseconds bound)
    {
        // The watchdog names members by their rank in MPI_COMM_WORLD; the layout numbers them in all().
        const std::vector<int> in_world = detail::world_ranks(all_.native());
        const bool spread = !single_process();
        auto name_of = [in_world, spread, l = layout_](int process) {
            for (std::size_t p = 0; p < in_world.size(); ++p)
                if (in_world[p] == process)
                    return "process " + std::to_string(p) + (spread ? " " + l.at(static_cast<int>(p)).text() : std::string());
            return "process " + std::to_string(process) + " of MPI_COMM_WORLD";
        };
        all_.set_watchdog(bound, name_of);
        if (groups_)
            for (communicator* c : {&groups_->tensor, &groups_->data, &groups_->pipeline}) c->set_watchdog(bound, name_of);
    }

private:
    static tpipe::layout placed(const tpipe::axes& a, int processes)
    {
        auto l = tpipe::layout::one_rank_per_process(a);  // refuses empty axes first
        if (processes == a.size()) return l;
        if (processes == 1) return tpipe::layout::single_process(a);
        throw invalid_argument("mpi::job: the job has " + std::to_string(processes) + " processes, but " + a.text() + " need " +
                               std::to_string(a.size()) + " (one each) or 1 (every rank on threads); launch it with mpirun -np " +
                               std::to_string(a.size()));
    }
    void refuse_single(const char* what, const char* does) const
    {
        if (single_process())
            throw invalid_argument(std::string("mpi::job::") + what + ": this one process " + does + " of " +
                                   layout_.sizes().text() + " on its threads; give each thread its groups with "
                                   "tpipe::split_groups over a tpipe::thread_group, or launch it with mpirun -np " +
                                   std::to_string(layout_.sizes().size()));
    }
    group_communicators<communicator>& groups(const char* what)
    {
        refuse_single(what, "runs every group");
        return *groups_;
    }

    communicator all_;
    tpipe::layout layout_;
    std::optional<coordinate> where_;
    std::unique_ptr<tpipe::link_engine> links_;  // outlives the transport
    std::vector<std::unique_ptr<mpi::transport>> transports_;
    std::optional<group_communicators<communicator>> groups_;
};

} // namespace tpipe::mpi
