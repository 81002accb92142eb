#pragma once
// The elastic planner's prices of a step's end (unit_seconds::update and ::reduce): the optimizer
// step, apportioned to the units by their parameters, and each unit's share of the gradients'
// all-reduce between replicas. Without them a forecast counts the pipeline only, and a shape
// with replicas (which all-reduce) or a short pipeline (where the step is a larger share) looks
// faster than it runs.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tpipe/async/on_threads.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/elastic/driver_options.hpp"

namespace tpipe::elastic {

//! Seconds of one all-reduce of `n` floats between two replicas on threads, as the thread
//! driver's data parallelism runs it (tpipe::thread_communicator): the median of 5, after one to
//! warm up. Processes sum over shared memory at a similar cost; that is not measured here.
inline double two_replica_all_reduce_seconds(std::size_t n)
{
    if (n == 0) return 0;
    thread_group group(2);
    std::vector<std::vector<float>> grads(2, std::vector<float>(n, 1.0f));
    std::vector<double> times;
    on_threads(2, [&](std::size_t m) {
        thread_communicator c = group.member(static_cast<int>(m));
        for (int rep = 0; rep < 6; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            sync_wait([](thread_communicator& c, std::span<float> v) -> task<void> {
                co_await c.all_reduce_sum(v);
            }(c, std::span<float>(grads[m])));
            if (m == 0 && rep > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    });
    std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
    return times[times.size() / 2];
}

//! Fills u.update and u.reduce from the units' parameter counts (`parameters[i]`: unit i's
//! trainable values) and the seconds of one optimizer step over all of them: each unit's update
//! is its share of the step (an optimizer step is linear in the parameters), its reduce the
//! two-replica all-reduce of its gradients.
inline void price_step(unit_seconds& u, std::span<const std::size_t> parameters, double step_seconds)
{
    if (!(step_seconds >= 0))
        throw invalid_argument("price_step: the optimizer step's seconds must be >= 0, got " + std::to_string(step_seconds));
    std::size_t total = 0;
    for (std::size_t n : parameters) total += n;
    u.update.clear();
    u.reduce.clear();
    for (std::size_t n : parameters) {
        u.update.push_back(total > 0 ? step_seconds * static_cast<double>(n) / static_cast<double>(total) : 0.0);
        u.reduce.push_back(two_replica_all_reduce_seconds(n));
    }
}

} // namespace tpipe::elastic
