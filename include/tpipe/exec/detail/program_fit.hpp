#pragma once
// detail::check_program_fits: the runner's first check of a program against the pipeline it is to
// run: as many stages, one action list per rank. Says what to change when they do not fit.
#include <string>

#include "tpipe/core/error.hpp"
#include "tpipe/schedule/program.hpp"

namespace tpipe::detail {

//! Throws tpipe::invalid_program unless `prog` has `stages` stages and one action list per rank.
inline void check_program_fits(const program& prog, int stages)
{
    if (prog.stages() != stages && prog.ranks > 0 && prog.stages() > prog.ranks)  // interleaved, zb-v, ...
        throw invalid_program("the program has " + std::to_string(prog.stages()) + " stages (" +
                              std::to_string(prog.stages() / prog.ranks) + " on each of its " + std::to_string(prog.ranks) +
                              " ranks) but the pipeline has " + std::to_string(stages) + "; cut the model into " +
                              std::to_string(prog.stages()) +
                              " stages for this schedule, or pick one with a stage per rank (1f1b, zb-h1, ...)");
    if (prog.stages() != stages)
        throw invalid_program("the program has " + std::to_string(prog.stages()) + " stages but the pipeline has " +
                              std::to_string(stages) + "; build the schedule for " + std::to_string(stages) + " stages");
    if (prog.ranks < 1 || static_cast<int>(prog.actions.size()) != prog.ranks)
        throw invalid_program("the program must have one action list per rank (" + std::to_string(prog.ranks) +
                              " ranks, " + std::to_string(prog.actions.size()) + " lists)");
}

} // namespace tpipe::detail
