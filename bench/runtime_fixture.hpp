#pragma once
// What the runtime benchmarks share (bench_runtime.cpp, bench_peer_taskflow.cpp): stages that
// spin for a given time, a warmed-up runner, the forward-only program of the per-token
// comparisons, medians.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "tpipe/exec/run.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe_bench {

using clock_type = std::chrono::steady_clock;

inline void spin(std::chrono::nanoseconds d)
{
    if (d.count() <= 0) return;
    const auto until = clock_type::now() + d;
    while (clock_type::now() < until) {
    }
}

struct spin_stage {
    using input = int;
    using output = int;
    std::chrono::nanoseconds t{0};
    int forward(const tpipe::unit&, int x)
    {
        spin(t);
        return x + 1;
    }
    int backward(const tpipe::unit&, int g)
    {
        spin(t);
        return g;
    }
    int backward_input(const tpipe::unit&, int g)
    {
        spin(t);
        return g;
    }
    void backward_weight(const tpipe::unit&) { spin(t); }
};

//! Calls body(runner, io) with a runner of `prog` over its stage count of spin stages (work t
//! per action), after running iterations for 0.3 s: storage allocated, and the OS has spread the
//! new loop threads over the cores (on a 2-vCPU VM both can share one core for the first ~0.2 s).
template <class Body>
void with_warm_runner(const tpipe::program& prog, tpipe::cpu_engine& eng, const tpipe::run_options& opts,
                      std::chrono::nanoseconds t, Body&& body)
{
    tpipe::uniform_pipeline<spin_stage> pipe(
        std::vector<spin_stage>(static_cast<std::size_t>(prog.stages()), spin_stage{t}));
    tpipe::io_for<decltype(pipe)> io;
    io.source = [](const tpipe::unit& u) { return u.microbatch; };
    tpipe::runner r(pipe, prog, eng, opts);
    const auto until = clock_type::now() + std::chrono::milliseconds(300);
    do r.run(io);
    while (clock_type::now() < until);
    body(r, io);
}

inline double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

//! Forward-only program: P ranks, stage r on rank r, T units; each token flows 0 -> P-1.
inline tpipe::program forward_only(int P, int T)
{
    tpipe::program p;
    p.ranks = P;
    p.stage_rank.clear();
    for (int r = 0; r < P; ++r) p.stage_rank.push_back(r);
    p.units = tpipe::microbatches(T);
    p.actions.assign(static_cast<std::size_t>(P), {});
    for (int r = 0; r < P; ++r)
        for (int u = 0; u < T; ++u) {
            if (r > 0) p.actions[r].push_back({r, tpipe::op::RECV_F, u, 0});
            p.actions[r].push_back({r, tpipe::op::F, u, 0});
            if (r + 1 < P) p.actions[r].push_back({r, tpipe::op::SEND_F, u, 0});
        }
    return p;
}

} // namespace tpipe_bench
