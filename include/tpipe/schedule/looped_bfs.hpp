#pragma once
// Looped breadth-first (Lamy-Poirier 2022, PyTorch's ScheduleLoopedBFS): V chunks per rank in
// loop placement; a rank runs every microbatch through its first chunk, then its second, ...,
// then the backwards chunk by chunk in reverse, microbatches in reverse. One pass over each
// chunk's parameters per step (what FSDP wants), at GPipe's activation memory.
#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

struct looped_bfs {
    int virtual_stages = 2;  //!< model chunks per rank (V)

    constexpr std::string_view name() const { return "looped-bfs"; }
    constexpr tpipe::program program(const topology& t, const scheme& units) const
    {
        detail::check_topology(t);
        const int P = t.ranks, V = virtual_stages, M = units.microbatches();
        if (V < 1) detail::refuse("looped BFS needs virtual_stages >= 1, got " + std::to_string(V));
        microbatch_order order(P);
        for (int r = 0; r < P; ++r) {
            for (int c = 0; c < V; ++c)
                for (int m = 0; m < M; ++m) order[r].push_back({c * P + r, op::F, m});
            for (int c = V - 1; c >= 0; --c)
                for (int m = M - 1; m >= 0; --m) order[r].push_back({c * P + r, op::B, m});
        }
        return expand_slices(P, loop_placement(P, P * V), units, order);
    }
};

} // namespace tpipe
