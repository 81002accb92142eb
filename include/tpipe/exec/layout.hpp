#pragma once
// tpipe::layout: where a job's work runs. A job has three axes, tensor x pipeline x data: t tensor
// ranks split each stage's layers, K pipeline ranks run the stages, d replicas train on different
// rows. A layout maps each coordinate (replica d, pipeline rank r, tensor rank k) to a process;
// coordinates on one process run on its threads. Every process builds the same layout.
//
// The default order is Megatron's, tensor ranks nearest: coordinate (d, r, k) has index
// (d * K + r) * t + k, and one_rank_per_process puts it on the process of that number (with t = 1:
// rank r of replica d on process d * K + r). Any other map is accepted and checked.
//
// Its groups, each ordered along its own axis (a member's rank in the group is its position):
//   tensor group of (d, r):  the t tensor ranks of stage r of replica d (they split one stage),
//   data group of (r, k):    the d replicas of tensor rank k of stage r (they sum its gradients),
//   pipeline of (d, k):      the K pipeline ranks (a transport connects them: tensor rank k of
//                            stage r talks to tensor rank k of stage r + 1, as Megatron's do).
// colour() and position() are a coordinate's arguments to a communicator's split(colour, key);
// tpipe::split_groups (tpipe/exec/group_communicators.hpp) makes every group's communicator.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe {

//! The sizes of a job's three axes.
struct axes {
    int tensor_ranks = 1;
    int pipeline_ranks = 1;
    int replicas = 1;

    //! Coordinates (t * K * d).
    int size() const noexcept { return tensor_ranks * pipeline_ranks * replicas; }
    //! e.g. "2 tensor ranks x 4 pipeline ranks x 1 replica".
    std::string text() const
    {
        auto n = [](int v, const char* one, const char* many) { return std::to_string(v) + " " + (v == 1 ? one : many); };
        return n(tensor_ranks, "tensor rank", "tensor ranks") + " x " + n(pipeline_ranks, "pipeline rank", "pipeline ranks") +
               " x " + n(replicas, "replica", "replicas");
    }
    friend bool operator==(const axes&, const axes&) = default;
};

//! One place of the job: pipeline rank `rank` of tensor rank `tensor_rank` of replica `replica`.
struct coordinate {
    int replica = 0;
    int rank = 0;
    int tensor_rank = 0;

    //! e.g. "(replica 0, rank 1, tensor rank 0)".
    std::string text() const
    {
        return "(replica " + std::to_string(replica) + ", rank " + std::to_string(rank) + ", tensor rank " +
               std::to_string(tensor_rank) + ")";
    }
    friend bool operator==(const coordinate&, const coordinate&) = default;
};

//! Names one pipeline (the K pipeline ranks of one replica and tensor rank): what a transport connects.
struct pipeline_id {
    int replica = 0;
    int tensor_rank = 0;
};

//! The three kinds of group a layout names (see the file comment).
enum class group_kind { tensor, data, pipeline };

class layout {
public:
    //! Every coordinate in one process (on its threads).
    static layout single_process(axes a) { return layout(a, std::vector<int>(checked(a), 0)); }
    static layout single_process(int pipeline_ranks, int replicas = 1)
    {
        return single_process(axes{.pipeline_ranks = pipeline_ranks, .replicas = replicas});
    }
    //! Coordinate (d, r, k) on process (d * K + r) * t + k: t * K * d processes, Megatron's order.
    static layout one_rank_per_process(axes a)
    {
        std::vector<int> p(checked(a));
        for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int>(i);
        return layout(a, std::move(p));
    }
    static layout one_rank_per_process(int pipeline_ranks, int replicas = 1)
    {
        return one_rank_per_process(axes{.pipeline_ranks = pipeline_ranks, .replicas = replicas});
    }
    //! One coordinate per process, in any order: process p runs `of_process[p]`. Every coordinate
    //! appears exactly once.
    static layout from_coordinates(axes a, const std::vector<coordinate>& of_process)
    {
        const std::size_t n = checked(a);
        if (of_process.size() != n)
            throw invalid_argument("layout: " + std::to_string(of_process.size()) + " processes are given a coordinate, but " +
                                   a.text() + " need one process for each of their " + std::to_string(n) + " coordinates");
        std::vector<int> p(n, -1);
        for (std::size_t q = 0; q < n; ++q) {
            const coordinate& c = of_process[q];
            const std::size_t i = static_cast<std::size_t>(index_in(a, c, "layout::from_coordinates"));
            if (p[i] >= 0)
                throw invalid_argument("layout: " + c.text() + " is given to process " + std::to_string(p[i]) + " and to process " +
                                       std::to_string(q) + "; each coordinate runs on one process");
            p[i] = static_cast<int>(q);
        }
        return layout(a, std::move(p));
    }

    //! Any map: process_of[index(c)] runs coordinate c (index: (d * K + r) * t + k). Processes are
    //! numbered 0..N-1 and each runs at least one coordinate.
    layout(axes a, std::vector<int> process_of) : axes_(a), process_of_(std::move(process_of))
    {
        const std::size_t n = checked(a);
        if (process_of_.size() != n)
            throw invalid_argument("layout: process_of names " + std::to_string(process_of_.size()) + " coordinates, but " +
                                   a.text() + " have " + std::to_string(n));
        for (int p : process_of_) {
            if (p < 0) throw invalid_argument("layout: process numbers must be >= 0, got " + std::to_string(p));
            processes_ = std::max(processes_, p + 1);
        }
        std::vector<bool> used(static_cast<std::size_t>(processes_), false);
        for (int p : process_of_) used[static_cast<std::size_t>(p)] = true;
        for (std::size_t p = 0; p < used.size(); ++p)
            if (!used[p])
                throw invalid_argument("layout: process " + std::to_string(p) + " runs no coordinate, but processes up to " +
                                       std::to_string(processes_ - 1) + " do; number the processes 0.." +
                                       std::to_string(processes_ - 1) + " without gaps");
    }
    //! One tensor rank: process_of[d * K + r] runs rank r of replica d.
    layout(int pipeline_ranks, int replicas, std::vector<int> process_of)
        : layout(axes{.pipeline_ranks = pipeline_ranks, .replicas = replicas}, std::move(process_of))
    {
    }

    const axes& sizes() const noexcept { return axes_; }
    int tensor_ranks() const noexcept { return axes_.tensor_ranks; }
    int pipeline_ranks() const noexcept { return axes_.pipeline_ranks; }
    int replicas() const noexcept { return axes_.replicas; }
    //! Processes the layout uses (the largest process number + 1).
    int processes() const noexcept { return processes_; }

    //! (d * K + r) * t + k; refuses a coordinate outside the axes.
    int index(const coordinate& c) const { return index_in(axes_, c, "layout"); }
    coordinate at(int index) const
    {
        if (index < 0 || index >= axes_.size())
            throw invalid_argument("layout: index " + std::to_string(index) + " is outside [0, " + std::to_string(axes_.size()) +
                                   ") for " + axes_.text());
        const int t = axes_.tensor_ranks, K = axes_.pipeline_ranks;
        return {.replica = index / (t * K), .rank = index / t % K, .tensor_rank = index % t};
    }
    int process_of(const coordinate& c) const { return process_of_[static_cast<std::size_t>(index(c))]; }
    int process_of(int replica, int rank, int tensor_rank = 0) const
    {
        return process_of(coordinate{.replica = replica, .rank = rank, .tensor_rank = tensor_rank});
    }
    //! The coordinates `process` runs, in index order.
    std::vector<coordinate> coordinates_of(int process) const
    {
        std::vector<coordinate> out;
        for (int i = 0; i < axes_.size(); ++i)
            if (process_of_[static_cast<std::size_t>(i)] == process) out.push_back(at(i));
        return out;
    }
    //! The replicas that have at least one coordinate on `process`.
    std::vector<int> replicas_of(int process) const
    {
        std::vector<int> out;
        for (const coordinate& c : coordinates_of(process))
            if (out.empty() || out.back() != c.replica) out.push_back(c.replica);
        return out;
    }

    //! The t tensor ranks of stage `rank` of replica `replica`, by tensor rank.
    std::vector<coordinate> tensor_group(int replica, int rank) const { return group(group_kind::tensor, {replica, rank, 0}); }
    //! The d replicas of tensor rank `tensor_rank` of stage `rank`, by replica.
    std::vector<coordinate> data_group(int rank, int tensor_rank) const { return group(group_kind::data, {0, rank, tensor_rank}); }
    //! The K pipeline ranks of replica `replica` and tensor rank `tensor_rank`, by rank.
    std::vector<coordinate> pipeline(int replica, int tensor_rank) const
    {
        return group(group_kind::pipeline, {replica, 0, tensor_rank});
    }
    //! The group of kind `kind` that `member` belongs to, ordered by position().
    std::vector<coordinate> group(group_kind kind, coordinate member) const
    {
        check(member);
        std::vector<coordinate> out;
        for (int i = 0; i < group_size(kind); ++i) {
            (kind == group_kind::tensor ? member.tensor_rank : kind == group_kind::data ? member.replica : member.rank) = i;
            out.push_back(member);
        }
        return out;
    }
    //! The processes that run `coordinates`, in their order (a process may repeat).
    std::vector<int> processes_of(const std::vector<coordinate>& coordinates) const
    {
        std::vector<int> out;
        for (const coordinate& c : coordinates) out.push_back(process_of(c));
        return out;
    }

    //! Groups of `kind`: d * K tensor groups, K * t data groups, d * t pipelines.
    int groups(group_kind kind) const noexcept
    {
        const int t = axes_.tensor_ranks, K = axes_.pipeline_ranks, d = axes_.replicas;
        return kind == group_kind::tensor ? d * K : kind == group_kind::data ? K * t : d * t;
    }
    //! Members of each group of `kind`: t, d or K.
    int group_size(group_kind kind) const noexcept
    {
        return kind == group_kind::tensor ? axes_.tensor_ranks : kind == group_kind::data ? axes_.replicas : axes_.pipeline_ranks;
    }
    //! Which group of `kind` `c` is in, in [0, groups(kind)): the colour of a split.
    int colour(group_kind kind, const coordinate& c) const
    {
        check(c);
        const int t = axes_.tensor_ranks, K = axes_.pipeline_ranks;
        return kind == group_kind::tensor ? c.replica * K + c.rank
               : kind == group_kind::data ? c.rank * t + c.tensor_rank
                                          : c.replica * t + c.tensor_rank;
    }
    //! Where `c` stands in its group of `kind` (its tensor rank, replica or rank): the key of a split.
    int position(group_kind kind, const coordinate& c) const
    {
        check(c);
        return kind == group_kind::tensor ? c.tensor_rank : kind == group_kind::data ? c.replica : c.rank;
    }

private:
    void check(const coordinate& c) const { index_in(axes_, c, "layout"); }
    static std::size_t checked(const axes& a)
    {
        if (a.tensor_ranks < 1 || a.pipeline_ranks < 1 || a.replicas < 1)
            throw invalid_argument("layout: every axis needs at least 1, got " + a.text());
        if (static_cast<long long>(a.tensor_ranks) * a.pipeline_ranks * a.replicas > (1LL << 30))
            throw invalid_argument("layout: " + a.text() + " are more than 2^30 coordinates");
        return static_cast<std::size_t>(a.size());
    }
    static int index_in(const axes& a, const coordinate& c, const char* who)
    {
        if (c.replica < 0 || c.replica >= a.replicas || c.rank < 0 || c.rank >= a.pipeline_ranks || c.tensor_rank < 0 ||
            c.tensor_rank >= a.tensor_ranks)
            throw invalid_argument(std::string(who) + ": " + c.text() + " is outside " + a.text());
        return (c.replica * a.pipeline_ranks + c.rank) * a.tensor_ranks + c.tensor_rank;
    }

    axes axes_;
    std::vector<int> process_of_;
    int processes_ = 0;
};

} // namespace tpipe
