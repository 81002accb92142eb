#pragma once
// train_gpt's job: which replicas and pipeline ranks this process runs (job), one data-parallel
// replica's stage-local state, pipeline and runner (replica), and under mpirun the processes'
// communicators and the collective parts of a step (mpi_job).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <tpipe/comm/blocking_group.hpp>
#include <tpipe/comm/every_member.hpp>
#include <tpipe/comm/thread_communicator.hpp>
#include "cli/flag_reader.hpp"
#include <tpipe/exec/data_parallel.hpp>
#include <tpipe/exec/run.hpp>
#include <tpipe/async/sync_wait.hpp>

#include "gpt/fingerprint.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/stage_state.hpp"
#include "train_flags.hpp"

#ifdef TPIPE_GPT_MPI
#include "../common/links.hpp"
#include <tpipe/mpi/communicator.hpp>
#include <tpipe/mpi/job.hpp>
#include <tpipe/mpi/transport.hpp>
#endif

namespace train_gpt {

using tpipe::usage_error;

//! Which (replica, pipeline rank) pairs this process runs: all of them without MPI, one under it.
struct job {
    int process = 0;
    int replica = -1;  //!< -1: every replica and rank
    int rank = -1;
    gpt::tensor_split tensor{};  //!< this process's tensor rank (--tp; over MPI only)
    bool has_replica(int d) const { return replica < 0 || replica == d; }
    bool runs(int d, int r) const { return has_replica(d) && (rank < 0 || rank == r); }
    int first_replica() const { return replica < 0 ? 0 : replica; }
};

//! One data-parallel replica on this process: the state of its stages here (stage-local:
//! parameters, gradients and AdamW moments of those stages only), its pipeline and runner. With
//! --tp on threads, one of these per tensor rank of the replica: its share of the stages.
struct replica {
    using pipe_t = tpipe::uniform_pipeline<gpt::stage<float>>;
    using runner_t = tpipe::runner<pipe_t, tpipe::cpu_engine>;  // one type on threads and over MPI
    using tensor_sum = tpipe::blocking_group<tpipe::thread_communicator>;

    int index;
    const options* o;
    int tensor_rank = 0;
    std::unique_ptr<gpt::stage_states<float>> state;
    std::unique_ptr<gpt::pipelined_model<float>> model;
    std::unique_ptr<tpipe::cpu_engine> engine;        // on threads with --tp: a loop per rank of its own
    std::unique_ptr<runner_t> runner;
    std::vector<tpipe::thread_communicator> members;  // replicas on threads: one per stage
    std::unique_ptr<tpipe::data_parallel<tpipe::thread_communicator>> dp_threads;
    std::vector<tpipe::thread_communicator> tensor_members;  // --tp on threads: one per stage, and the clip's
    std::vector<std::unique_ptr<tensor_sum>> tensor_sums;

    //! Stage s of this tensor rank sums its partial products over `group` (a tpipe::blocking_group
    //! of its tensor group, on threads or over MPI), with --sequence-parallel splits its LayerNorm
    //! regions along the positions, and with --scatter-gather splits what crosses
    //! its boundaries and gathers it there (gpt::boundary_split).
    template <class Group>
    void join_tensor_group(int s, int stages, Group& group)
    {
        model->part_at(s).set_tensor_sum([&group](std::span<float> v) { group.all_reduce_sum(v); });
        if (o->sequence_parallel)
            model->part_at(s).set_sequence_parallel([&group](std::span<float> v) { group.reduce_scatter_sum(v); },
                                                    [&group](std::span<float> v) { group.all_gather(v); });
        if (o->scatter_gather)
            model->pipe().stage(static_cast<std::size_t>(s)).split = gpt::boundary_split<float>{
                .all_gather = [&group](std::span<float> v) { group.all_gather(v); },
                .rank = tensor_rank,
                .ranks = o->tp,
                .gathers_input = s > 0,
                .scatters_output = s + 1 < stages,
                .width = o->cfg.d_model};
    }
    //! Bytes this replica's stages here handed the pipeline (outputs and input gradients) so far.
    std::uint64_t pipeline_bytes_sent()
    {
        std::uint64_t n = 0;
        for (int s = 0; s < model->stages(); ++s)
            if (model->has_part(s)) n += model->pipe().stage(static_cast<std::size_t>(s)).bytes_sent;
        return n;
    }

    //! Every replica starts from the same weights (same seed); each draws its own batches.
    replica(const options& opts, int d, int k = 0) : index(d), o(&opts), tensor_rank(k) {}

    void build(int stages, int threads_per_part, const std::vector<bool>& here, gpt::tensor_split tensor = {})
    {
        state = std::make_unique<gpt::stage_states<float>>(o->cfg, stages, std::vector<int>{}, here,
                                                           gpt::adamw_options{.lr = o->lr}, o->seed, tensor);
        model = std::make_unique<gpt::pipelined_model<float>>(o->cfg, state->pointers(), threads_per_part);
    }
    //! Whether the stages this replica and `other` both hold have the same weights, bitwise.
    bool same_weights(const replica& other) const
    {
        for (int s = 0; s < state->stages(); ++s)
            if (state->holds(s) && other.state->holds(s) && state->params(s).value != other.state->params(s).value)
                return false;
        return true;
    }
    //! FNV-1a of the weights of stage `stage` (-1: every stage here, in the whole model's order;
    //! with every stage here, that of the whole model's flat vector), continued from `h`.
    std::uint64_t fingerprint(std::uint64_t h, int stage = -1) const
    {
        auto add = [&](std::int64_t, std::span<const float> v) { h = gpt::fnv_update(h, v); };
        if (stage < 0) state->each_tensor(false, add);
        else state->each_tensor(stage, false, add);
        return h;
    }

    //! --shard-optimizer: each stage's AdamW keeps and steps only the elements whose reduced
    //! gradients `dp` leaves here (this replica's segment of every bucket of every gradient span).
    template <class DP>
    void shard_optimizer(const DP& dp)
    {
        for (int s = 0; s < state->stages(); ++s) {
            if (!state->holds(s)) continue;
            std::vector<tpipe::element_range> owned;
            for (const auto g : model->part_at(s).gradient_ranges())
                for (const auto r : dp.template shard<float>(s, g.size)) owned.push_back({g.begin + r.begin, r.size});
            state->opt(s).shard(std::move(owned));
        }
    }
    //! The optimizer step of the stages here, once the gradients are reduced over the replicas:
    //! the tied copies' gradients summed (`over_pipeline`: over the pipeline's processes under
    //! MPI), the norm's exact squares summed (`over_all`: over the pipeline's processes, and the
    //! replicas when each holds a shard), every stage stepped with that norm.
    template <class Pipeline, class All>
    tpipe::task<void> step_stages(Pipeline over_pipeline, All over_all)
    {
        if (auto* tie = state->tie()) co_await tie->sum_with(over_pipeline);  // before the squares: the embedding's count e + h
        auto squares = state->squares();
        co_await over_all(squares.digits());
        state->step(squares);
    }
    //! --shard-optimizer's step, after the run reduce-scattered the gradients; every replica runs
    //! it together. The tied embedding's and head's gradients are all-gathered whole (the tied
    //! sum needs both; all of them with `whole_gradients`, for --check), the norm is summed over
    //! every shard (exact: the same bits as one replica's whole sum), each stage steps its
    //! shard, and the parameters are all-gathered: bitwise the replicated optimizer's step.
    //! `over_pipeline(tied)` sums over the pipeline's processes (under MPI), `over_all(digits)`
    //! over the replicas and processes.
    template <class DP, class Pipeline, class All>
    tpipe::task<void> sharded_step(DP& dp, Pipeline over_pipeline, All over_all, bool whole_gradients)
    {
        auto& st = *state;
        const int last = st.stages() - 1;
        for (int s = 0; s < st.stages(); ++s) {
            if (!st.holds(s)) continue;
            const auto spans = model->part_at(s).gradient_ranges();
            for (std::size_t k = 0; k < spans.size(); ++k) {
                const bool tied = st.tied_across_stages() && ((s == 0 && k == 0) || (s == last && k + 1 == spans.size()));
                if (tied || whole_gradients)
                    co_await dp.all_gather(s, std::span<float>(st.params(s).grad).subspan(spans[k].begin, spans[k].size));
            }
        }
        co_await step_stages(over_pipeline, over_all);
        for (int s = 0; s < st.stages(); ++s)
            if (st.holds(s))
                for (const auto g : model->part_at(s).gradient_ranges())
                    co_await dp.all_gather(s, std::span<float>(st.params(s).value).subspan(g.begin, g.size));
    }

    //! The data stream of replica d (replica 0's is the stream of a run without replicas).
    static std::uint64_t data_seed(const options& o, int d)
    {
        return o.seed * 0x9E3779B97F4A7C15ULL + 7 + static_cast<std::uint64_t>(d) * 0xD1B54A32D192ED03ULL;
    }

};

#ifdef TPIPE_GPT_MPI
//! train_gpt under mpirun: process (d * P + r) * T + k runs tensor rank k of pipeline rank r of
//! replica d (tpipe::mpi::job's order; T = 1 without --tp).
//!
//! Stage-local state: each process holds and steps its stages only (with --tp, its tensor rank's
//! share of them). After the run, the replica's pipeline ranks sum (tpipe::mpi::communicator,
//! rank-order fold) the tied gradient's shares (embedding + head) and the exact sums of squares
//! of the norm clip (integers: the sum is exact), then the tensor group sums the squares of its
//! shares, so every process clips with the same global norm, bitwise that of the same run on
//! threads.
class mpi_job {
public:
    job where;

    //! `watchdog` (0: none) bounds every collective of the job from here on: the plan's share, the
    //! tied gradient's and the norm's sums, the loss, the checkpoint's barrier. A stopped process
    //! is named by the others and the job ends, instead of hanging in them.
    mpi_job(int ranks, int replicas, int tensor_ranks, std::chrono::milliseconds watchdog, const std::string& link)
        : P_(ranks), D_(replicas), T_(tensor_ranks)
    {
        int size = 0;
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        if (size != T_ * P_ * D_)  // in the flags' words (tpipe::mpi::job would also take one process)
            throw usage_error("--transport mpi with " + (T_ > 1 ? "--tp " + std::to_string(T_) + ", " : std::string()) +
                              "--stages " + std::to_string(P_) + " and --dp " + std::to_string(D_) + " needs " +
                              std::to_string(T_ * P_ * D_) + " processes, but the job has " + std::to_string(size) +
                              "; launch it with mpirun -np " + std::to_string(T_ * P_ * D_));
        job_ = std::make_unique<tpipe::mpi::job>(tpipe::axes{.tensor_ranks = T_, .pipeline_ranks = P_, .replicas = D_},
                                                 MPI_COMM_WORLD, tpipe_examples::link_maker_of(link));
        const tpipe::coordinate me = job_->where();
        where.process = job_->process();
        where.replica = me.replica;
        where.rank = me.rank;
        where.tensor = {me.tensor_rank, T_};
        transport_ = &job_->transport();
        replicas_ = &job_->data();
        pipeline_comm_ = &job_->pipeline();
        world_ = &job_->all();
        if (T_ > 1) tensor_ = std::make_unique<tpipe::blocking_group<tpipe::mpi::communicator>>(job_->tensor());
        job_->set_watchdog(watchdog);
    }

    //! While it lives, this process works alone on purpose (process 0 profiling the TeraPipe plan
    //! that share() sends): the others' watchdog waits on while it answers, and names `what` if it
    //! stops (tpipe::mpi::communicator::busy).
    tpipe::mpi::busy_section busy(std::string what) { return world_->busy(std::move(what)); }

    //! The largest of every process's `mine`: with a stop signal's number (0: none), every process
    //! stops at the same step boundary, whichever of them the signal reached, and saves there.
    int agree_max(int mine)
    {
        const auto all = every_process(std::int32_t{mine});
        return *std::max_element(all.begin(), all.end());
    }

    //! Bytes this process's stages have sent to their tensor group (--tp) in the runs so far, as
    //! its MPI communicator counts them (tpipe::mpi::collective_traffic).
    std::uint64_t tensor_bytes_sent() const { return tensor_bytes_sent_; }

    //! Every process meets here (the checkpoint's commit waits for every shard).
    void barrier()
    {
        tpipe::sync_wait([](tpipe::mpi::communicator& c) -> tpipe::task<void> { co_await c.barrier(); }(*world_));
    }

    //! Process 0's TeraPipe plan (and its objective), on every process.
    tpipe::scheme share(const tpipe::scheme& mine, double& planned_T)
    {
        std::vector<std::int64_t> flat;
        for (const auto& m : mine.parts()) {
            flat.push_back(m.row_begin);
            flat.push_back(m.row_end);
            flat.push_back(static_cast<std::int64_t>(m.cuts.size()));
            flat.insert(flat.end(), m.cuts.begin(), m.cuts.end());
        }
        std::int64_t n = static_cast<std::int64_t>(flat.size());
        broadcast(std::span<std::int64_t>(&n, 1));
        flat.resize(static_cast<std::size_t>(n));
        broadcast(std::span<std::int64_t>(flat));
        broadcast(std::span<double>(&planned_T, 1));
        std::vector<tpipe::scheme::microbatch> mbs;
        for (std::size_t k = 0; k < flat.size();) {
            tpipe::scheme::microbatch m;
            m.row_begin = flat[k];
            m.row_end = flat[k + 1];
            m.cuts.assign(flat.begin() + static_cast<std::ptrdiff_t>(k + 3),
                          flat.begin() + static_cast<std::ptrdiff_t>(k + 3 + static_cast<std::size_t>(flat[k + 2])));
            k += 3 + static_cast<std::size_t>(flat[k + 2]);
            mbs.push_back(std::move(m));
        }
        return tpipe::scheme(std::move(mbs));
    }

    void connect(replica& r, const tpipe::program& prog, tpipe::cpu_engine& engine, tpipe::run_options opts, bool sharded)
    {
        std::vector<tpipe::mpi::communicator*> comms(static_cast<std::size_t>(prog.stages()), nullptr);
        for (int s = 0; s < prog.stages(); ++s)
            if (prog.stage_rank[s] == where.rank) comms[s] = replicas_;
        if (D_ > 1) {
            dp_ = std::make_unique<tpipe::data_parallel<tpipe::mpi::communicator>>(r.model->pipe(), comms,
                                                                                   tpipe::data_parallel_options{.shard = sharded});
            opts.after_backward = dp_->hook();
            if (sharded) r.shard_optimizer(*dp_);
        }
        sharded_ = sharded && D_ > 1;
        if (tensor_)  // this rank's stages sum their partial products over the tensor group, in program order
            for (int s = 0; s < prog.stages(); ++s)
                if (r.model->has_part(s)) r.join_tensor_group(s, prog.stages(), *tensor_);
        r.runner = std::make_unique<replica::runner_t>(r.model->pipe(), prog, engine, *transport_, opts);
    }

    //! One step of this process's rank; returns the mean loss over every replica.
    double step(replica& r, const gpt::batch& b, tpipe::run_stats& stats, bool whole_gradients)
    {
        r.model->begin_step(b);
        const std::uint64_t before = T_ > 1 ? job_->tensor().traffic().sent : 0;
        stats = r.runner->run(r.model->io());
        const double mine = r.model->finish_step();
        // The stages' collectives only (and --sequence-parallel's sum of the LayerNorms' gradients), not the clip's.
        if (T_ > 1) tensor_bytes_sent_ += job_->tensor().traffic().sent - before;
        if (sharded_) {
            auto pipeline = [this](std::span<float> v) { return over_pipeline(v); };
            auto all = [this](std::span<std::int64_t> v) -> tpipe::task<void> {
                co_await replicas_->all_reduce_sum(v);
                co_await over_tensor_group_and_pipeline(v);
            };
            tpipe::sync_wait(r.sharded_step(*dp_, pipeline, all, whole_gradients));
        } else {  // every replica holds the reduced gradients: the sums run over the pipeline (and tensor group)
            auto pipeline = [this](auto v) { return over_pipeline(v); };
            auto all = [this](std::span<std::int64_t> v) { return over_tensor_group_and_pipeline(v); };
            tpipe::sync_wait(r.step_stages(pipeline, all));
        }
        // Added as train() adds the replicas' losses on threads: the same bits. Every tensor rank
        // of the last stage has the loss; rank 0's is counted (the others add zeros).
        const double counted = where.tensor.rank == 0 ? mine : 0.0;
        return tpipe::sync_wait(tpipe::replica_mean(*world_, counted, P_ * T_, D_));
    }

private:
    //! Every process's `mine`, in process order.
    template <class T>
    std::vector<T> every_process(T mine)
    {
        return tpipe::sync_wait(tpipe::every_member(*world_, mine));
    }
    //! Process 0's `values` on every process.
    template <class T>
    void broadcast(std::span<T> values)
    {
        tpipe::sync_wait([](tpipe::mpi::communicator& c, std::span<std::byte> b) -> tpipe::task<void> { co_await c.broadcast(b, 0); }(
            *world_, std::as_writable_bytes(values)));
    }

public:
    //! FNV-1a of the replica's whole weights: stage by stage, the rank running each continues
    //! the hash of the stages before it and hands it on.
    std::string fingerprint(const replica& r, const tpipe::program& prog)
    {
        if (T_ > 1) {  // the shares put together: the whole model's vector, hashed on every process
            // A piece at a time: the whole vector would add the whole model's weights to what
            // each process holds, at the end of the run.
            return gpt::fnv_hex_by_pieces(r.state->whole_size(), [&](std::int64_t first, std::int64_t count) {
                return whole(r, false, first, count);
            });
        }
        std::uint64_t h = gpt::fnv_offset_basis;
        for (int s = 0; s < prog.stages(); ++s) {
            const int owner = prog.stage_rank[static_cast<std::size_t>(s)];
            if (owner == where.rank) h = r.fingerprint(h, s);
            tpipe::sync_wait(broadcast_over_pipeline(h, owner));
        }
        return gpt::fnv_hex(h);
    }
    //! The replica's whole weights or gradients on every process of the replica (for --check).
    std::vector<float> whole(const replica& r, bool gradients)
    {
        return whole(r, gradients, 0, r.state->whole_size());
    }
    //! Elements [first, first + count) of whole(r, gradients).
    std::vector<float> whole(const replica& r, bool gradients, std::int64_t first, std::int64_t count)
    {
        std::vector<float> w = r.state->whole(gradients, first, count);  // zeros where other processes hold them
        tpipe::sync_wait(over_pipeline(std::span<float>(w)));
        if (T_ > 1)  // each element is one process's: the sums add zeros, exactly
            tpipe::sync_wait([](tpipe::mpi::communicator& c, std::span<float> v) -> tpipe::task<void> {
                co_await c.all_reduce_sum(v);
            }(job_->tensor(), std::span<float>(w)));
        return w;
    }

    //! Whether every process has this weights fingerprint.
    bool same_everywhere(const std::string& mine)
    {
        std::string first = mine;  // process 0's, after the broadcast
        broadcast(std::span<char>(first));
        const auto ok = every_process(std::int32_t{mine == first ? 1 : 0});
        return std::find(ok.begin(), ok.end(), 0) == ok.end();
    }

private:
    //! Sums `values` over the replica's pipeline ranks (rank-order fold; exact for integers).
    template <class V>
    tpipe::task<void> over_pipeline(std::span<V> values)
    {
        if (!values.empty()) co_await pipeline_comm_->all_reduce_sum(values);
    }
    //! The clip's squares of this replica's shares, summed over its pipeline and tensor group.
    tpipe::task<void> over_tensor_group_and_pipeline(std::span<std::int64_t> squares)
    {
        co_await over_pipeline(squares);
        if (T_ > 1) co_await job_->tensor().all_reduce_sum(squares);
    }
        tpipe::task<void> broadcast_over_pipeline(std::uint64_t& h, int root)
    {
        co_await pipeline_comm_->broadcast(std::as_writable_bytes(std::span<std::uint64_t>(&h, 1)), root);
    }
    int P_, D_, T_;
    std::unique_ptr<tpipe::mpi::job> job_;  // the layout, the transport and every group's communicator
    tpipe::mpi::transport* transport_ = nullptr;
    tpipe::mpi::communicator *replicas_ = nullptr, *pipeline_comm_ = nullptr, *world_ = nullptr;
    std::unique_ptr<tpipe::data_parallel<tpipe::mpi::communicator>> dp_;
    std::unique_ptr<tpipe::blocking_group<tpipe::mpi::communicator>> tensor_;  // the stages' sums (--tp)
    bool sharded_ = false;
    std::uint64_t tensor_bytes_sent_ = 0;
};
#endif

} // namespace train_gpt
