#pragma once
// The replicated optimizer and tpipe::sharded_optimizer side by side, on any communicator: the
// same D replicas, the same gradients (which depend on the parameters, so errors compound over
// steps), AdamW elementwise. Shared by the thread and MPI suites.
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "reduction_values.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/state/sharded_optimizer.hpp"

namespace tpipe_test {

//! One AdamW step of element k (bias-corrected, decoupled weight decay); `t` counts from 1.
inline void adamw(float& p, float g, float& m, float& v, int t)
{
    constexpr float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
    m = b1 * m + (1 - b1) * g;
    v = b2 * v + (1 - b2) * g * g;
    const float mh = m / (1 - std::pow(b1, static_cast<float>(t))), vh = v / (1 - std::pow(b2, static_cast<float>(t)));
    p -= lr * (mh / (std::sqrt(vh) + eps) + wd * p);
}

//! This replica's gradient at `step`: a function of the parameters plus replica-specific noise.
inline std::vector<float> gradient_of(int rank, int step, const std::vector<float>& p)
{
    auto g = values_of<float>(1000 * step + rank, p.size());
    for (std::size_t k = 0; k < p.size(); ++k) g[k] += 0.5f * p[k];
    return g;
}

//! `steps` steps of the replicated optimizer (all_reduce_sum, AdamW on all n) into `replicated`,
//! and of the sharded one into `sharded`; `state` receives the sharded optimizer's state size.
template <class C>
tpipe::task<void> replicated_and_sharded(C& c, std::size_t n, int steps, std::vector<float>& replicated, std::vector<float>& sharded,
                                         std::size_t& state)
{
    const float inv_d = 1.0f / static_cast<float>(c.size());
    replicated = values_of<float>(-1, n);
    std::vector<float> m(n), v(n);
    for (int t = 1; t <= steps; ++t) {
        auto g = gradient_of(c.rank(), t, replicated);
        co_await c.all_reduce_sum(std::span<float>(g));
        for (std::size_t k = 0; k < n; ++k) adamw(replicated[k], g[k] * inv_d, m[k], v[k], t);
    }

    sharded = values_of<float>(-1, n);
    tpipe::sharded_optimizer<float, C> zero(c, n);
    std::vector<float> sm(zero.shard().size), sv(zero.shard().size);  // 1/D of the state
    state = sm.size() + sv.size();
    for (int t = 1; t <= steps; ++t) {
        auto g = gradient_of(c.rank(), t, sharded);
        co_await zero.step(std::span<float>(sharded), std::span<float>(g), [&](std::span<float> p, std::span<float> gs, std::size_t) {
            for (std::size_t k = 0; k < p.size(); ++k) adamw(p[k], gs[k] * inv_d, sm[k], sv[k], t);
        });
    }
}

} // namespace tpipe_test
