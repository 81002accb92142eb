#pragma once
// A program says which rank runs which action when: per rank, an ordered list of actions.
// Compute-only programs hold computes (F/B/I/W, and maybe PyTorch's stage-level kinds such as
// REDUCE_GRAD); lowered programs also hold the sends and receives.
#include <string>
#include <vector>

#include "tpipe/schedule/action.hpp"
#include "tpipe/slice/scheme.hpp"

namespace tpipe {

//! The devices a schedule is laid out on.
struct topology {
    int ranks = 1;
};

struct program {
    int ranks = 1;
    std::vector<int> stage_rank{0};  //!< stage -> rank placement; its size is the stage count
    tpipe::scheme units;             //!< the units the actions refer to
    std::vector<std::vector<action>> actions{{}};  //!< per rank, in execution order

    constexpr int stages() const { return static_cast<int>(stage_rank.size()); }
    constexpr bool lowered() const
    {
        for (const auto& row : actions)
            for (const auto& a : row)
                if (is_comm(a.kind)) return true;
        return false;
    }
    //! True when some microbatch is cut into several token slices (PyTorch cannot express that).
    constexpr bool sliced() const
    {
        for (int m = 0; m < units.microbatches(); ++m)
            if (units.slices(m) > 1) return true;
        return false;
    }
    constexpr std::size_t size() const
    {
        std::size_t n = 0;
        for (const auto& row : actions) n += row.size();
        return n;
    }
    friend constexpr bool operator==(const program&, const program&) = default;
};

namespace detail {
constexpr void check_topology(const topology& t)
{
    if (t.ranks < 1) refuse("a pipeline needs at least 1 rank, got " + std::to_string(t.ranks));
}
} // namespace detail

//! Loop placement: stage s on rank s mod P (interleaved schedules).
constexpr std::vector<int> loop_placement(int ranks, int stages)
{
    std::vector<int> p(stages);
    for (int s = 0; s < stages; ++s) p[s] = s % ranks;
    return p;
}

//! V placement: stages 0..P-1 go down the ranks and P..2P-1 come back up (ZB-V).
constexpr std::vector<int> v_placement(int ranks)
{
    std::vector<int> p(2 * ranks);
    for (int s = 0; s < 2 * ranks; ++s) p[s] = s < ranks ? s : 2 * ranks - 1 - s;
    return p;
}

} // namespace tpipe
