#pragma once
// Where the runner's ranks run: which ranks this process runs, each rank's device, and which
// local ranks share a loop with another (they must yield to each other).
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/exec/engine.hpp"

namespace tpipe::detail {

struct rank_placement {
    std::vector<int> local_ranks;   //!< the ranks this process runs
    bool all_local = true;          //!< it runs every rank
    std::vector<int> device;        //!< per rank: its device
    std::vector<bool> shares_loop;  //!< per rank: another rank of this process runs on the same loop
};

//! `ranks` ranks on `eng`'s devices: `device_of_rank` (run_options), or rank r on device
//! r % devices; `runs(r)`: this process runs rank r. Throws tpipe::invalid_argument for a
//! device list of another length or naming a device the engine lacks.
template <engine E, class Runs>
rank_placement place_ranks(int ranks, const std::vector<int>& device_of_rank, E& eng, Runs&& runs)
{
    rank_placement p;
    for (int r = 0; r < ranks; ++r)
        if (runs(r)) p.local_ranks.push_back(r);
    p.all_local = static_cast<int>(p.local_ranks.size()) == ranks;
    p.device = device_of_rank;
    if (p.device.empty())
        for (int r = 0; r < ranks; ++r) p.device.push_back(r % eng.devices());
    if (static_cast<int>(p.device.size()) != ranks)
        throw invalid_argument("device_of_rank names " + std::to_string(p.device.size()) +
                               " ranks but the program has " + std::to_string(ranks));
    for (int d : p.device)
        if (d < 0 || d >= eng.devices())
            throw invalid_argument("device_of_rank names device " + std::to_string(d) + " but the engine has " +
                                   std::to_string(eng.devices()) + " devices");
    p.shares_loop.assign(static_cast<std::size_t>(ranks), false);
    for (int r : p.local_ranks) {
        const loop* home = &eng.loop_of(p.device[r]);
        p.shares_loop[r] = std::count_if(p.local_ranks.begin(), p.local_ranks.end(),
                                         [&](int q) { return &eng.loop_of(p.device[q]) == home; }) > 1;
    }
    return p;
}

} // namespace tpipe::detail
