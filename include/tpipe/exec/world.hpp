#pragma once
// tpipe::world: the layout of a job, P pipeline ranks x D data-parallel replicas over processes.
// Every process builds the same world; process_of(replica, rank) says which process runs a rank
// of a replica. With one process, every rank of every replica runs in it (replicas on threads);
// under mpirun -np P*D, world::one_rank_per_process(P, D) puts rank r of replica d on process
// d * P + r.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"

namespace tpipe {

class world {
public:
    //! Every rank of every replica in one process.
    static world single_process(int pipeline_ranks, int replicas = 1)
    {
        return world(pipeline_ranks, replicas, std::vector<int>(checked(pipeline_ranks, replicas), 0));
    }
    //! Rank r of replica d on process d * P + r (P * D processes).
    static world one_rank_per_process(int pipeline_ranks, int replicas = 1)
    {
        std::vector<int> p(checked(pipeline_ranks, replicas));
        for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<int>(i);
        return world(pipeline_ranks, replicas, std::move(p));
    }

    //! Any layout: process_of[d * P + r] runs rank r of replica d.
    world(int pipeline_ranks, int replicas, std::vector<int> process_of)
        : P_(pipeline_ranks), D_(replicas), process_of_(std::move(process_of))
    {
        if (process_of_.size() != checked(P_, D_))
            throw invalid_argument("world: process_of names " + std::to_string(process_of_.size()) +
                                   " (replica, rank) pairs but " + std::to_string(P_) + " ranks x " +
                                   std::to_string(D_) + " replicas need " + std::to_string(P_ * D_));
        for (int p : process_of_) {
            if (p < 0) throw invalid_argument("world: process numbers must be >= 0, got " + std::to_string(p));
            processes_ = std::max(processes_, p + 1);
        }
    }

    int pipeline_ranks() const noexcept { return P_; }
    int replicas() const noexcept { return D_; }
    //! Processes the layout uses (the largest process number + 1).
    int processes() const noexcept { return processes_; }
    int process_of(int replica, int rank) const
    {
        if (replica < 0 || replica >= D_ || rank < 0 || rank >= P_)
            throw invalid_argument("world: (replica " + std::to_string(replica) + ", rank " + std::to_string(rank) +
                                   ") is outside " + std::to_string(D_) + " replicas x " + std::to_string(P_) + " ranks");
        return process_of_[static_cast<std::size_t>(replica * P_ + rank)];
    }
    //! The replicas that have at least one rank on `process`.
    std::vector<int> replicas_of(int process) const
    {
        std::vector<int> out;
        for (int d = 0; d < D_; ++d)
            for (int r = 0; r < P_; ++r)
                if (process_of(d, r) == process) {
                    out.push_back(d);
                    break;
                }
        return out;
    }

private:
    static std::size_t checked(int P, int D)
    {
        if (P < 1 || D < 1)
            throw invalid_argument("world: needs at least 1 pipeline rank and 1 replica, got " + std::to_string(P) +
                                   " ranks and " + std::to_string(D) + " replicas");
        return static_cast<std::size_t>(P) * static_cast<std::size_t>(D);
    }

    int P_ = 1, D_ = 1;
    std::vector<int> process_of_;
    int processes_ = 0;
};

//! The processes a launcher (mpirun, mpiexec, srun) started together with this one, as the
//! variable it sets says; processes == 0 when none did. A program that is not told to use MPI but
//! runs as one of several would do the whole job once per process, independently, and exit 0.
struct launch {
    int processes = 0;
    std::string variable;  //!< e.g. OMPI_COMM_WORLD_SIZE=2

    static launch detect()
    {
        for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE", "MPI_LOCALNRANKS",
                              "SLURM_STEP_NUM_TASKS"}) {
            const char* text = std::getenv(v);
            if (!text || !*text) continue;
            char* end = nullptr;
            const long n = std::strtol(text, &end, 10);
            if (*end == '\0' && n > 0 && n < (1L << 30)) return {static_cast<int>(n), std::string(v) + "=" + text};
        }
        return {};
    }
};

} // namespace tpipe
