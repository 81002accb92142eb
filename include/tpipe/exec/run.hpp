#pragma once
// tpipe::run: one training iteration of a pipeline on an engine, following a program (a
// schedule's actions per rank), every rank in this process; a tpipe::runner (exec/runner.hpp)
// runs many and over processes. How an iteration executes and fails: exec/runner.hpp.
#include "tpipe/exec/runner.hpp"
#include "tpipe/schedule/schedule.hpp"

namespace tpipe {

//! Runs one iteration of `pipe` following `prog` (lowered here if compute-only) on `eng`, every
//! rank in this process.
template <pipeline_graph Pipe, engine E>
run_stats run(Pipe& pipe, const program& prog, E& eng, const io_for<Pipe>& io, run_options opts = {})
{
    runner<Pipe, E> r(pipe, prog, eng, std::move(opts));
    return r.run(io);
}

//! Runs one iteration with the program that `sched` makes for `units` on `topo`.
template <pipeline_graph Pipe, schedule S, engine E>
run_stats run(Pipe& pipe, const S& sched, const scheme& units, topology topo, E& eng, const io_for<Pipe>& io,
              run_options opts = {})
{
    return run(pipe, sched.program(topo, units), eng, io, std::move(opts));
}

} // namespace tpipe
