#pragma once
// tpipe::cuda::basic_event_pool: timing-disabled events, pooled per GPU and reused, so that a
// steady state creates none (created() counts the driver's event creations). Thread-safe: the
// loops of several devices share one pool.
#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/driver.hpp"

namespace tpipe::cuda {

template <driver D>
class basic_event_pool {
public:
    using event_type = typename D::event_type;

    explicit basic_event_pool(D& d) : d_(d) {}
    basic_event_pool(const basic_event_pool&) = delete;
    basic_event_pool& operator=(const basic_event_pool&) = delete;
    ~basic_event_pool()
    {
        for (auto& per_gpu : free_)
            for (event_type e : per_gpu) (void)d_.event_destroy(e);
    }

    //! An event of `gpu`: a pooled one, or a new one (made on `gpu`, the thread's current GPU is
    //! restored). Throws cuda_error if the driver cannot create one.
    event_type acquire(int gpu)
    {
        if (gpu < 0) throw invalid_argument("event_pool: GPU " + std::to_string(gpu) + " is negative; pass a GPU index >= 0");
        {
            std::lock_guard<std::mutex> g(m_);
            if (static_cast<std::size_t>(gpu) < free_.size() && !free_[static_cast<std::size_t>(gpu)].empty()) {
                event_type e = free_[static_cast<std::size_t>(gpu)].back();
                free_[static_cast<std::size_t>(gpu)].pop_back();
                return e;
            }
        }
        detail::device_scope<D> on(d_, gpu);
        event_type e{};
        detail::check(d_, d_.event_create(&e), "cudaEventCreateWithFlags", "event pool, GPU " + std::to_string(gpu));
        std::lock_guard<std::mutex> g(m_);
        ++created_;
        return e;
    }

    //! Gives an event of `gpu` back (it may still be pending: recording it again is allowed).
    void release(int gpu, event_type e) noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        try {
            if (static_cast<std::size_t>(gpu) >= free_.size()) free_.resize(static_cast<std::size_t>(gpu) + 1);
            free_[static_cast<std::size_t>(gpu)].push_back(e);
        } catch (...) {
            (void)d_.event_destroy(e);  // out of host memory: drop it rather than throw from a release
        }
    }

    //! Events the driver created for this pool so far.
    std::size_t created() const
    {
        std::lock_guard<std::mutex> g(m_);
        return created_;
    }
    //! Events waiting in the pool.
    std::size_t pooled() const
    {
        std::lock_guard<std::mutex> g(m_);
        std::size_t n = 0;
        for (const auto& per_gpu : free_) n += per_gpu.size();
        return n;
    }

private:
    D& d_;
    mutable std::mutex m_;
    std::vector<std::vector<event_type>> free_;  //!< per GPU
    std::size_t created_ = 0;
};

} // namespace tpipe::cuda
