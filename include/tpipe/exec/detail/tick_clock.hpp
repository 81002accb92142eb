#pragma once
// A cheap timestamp for per-action statistics: the invariant TSC on x86 (one rdtsc, no system
// call, no vDSO), converted to seconds with a factor calibrated once per process against
// std::chrono::steady_clock; steady_clock itself elsewhere.
#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace tpipe::detail {

struct tick_clock {
    static std::uint64_t now() noexcept
    {
#if defined(__x86_64__) || defined(__i386__)
        return __rdtsc();
#else
        return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
    }

    //! Seconds per tick (calibrated over 2 ms the first time it is asked for).
    static double seconds_per_tick()
    {
        static const double factor = calibrate();
        return factor;
    }

private:
    static double calibrate()
    {
#if defined(__x86_64__) || defined(__i386__)
        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        const std::uint64_t k0 = now();
        auto t1 = t0;
        while ((t1 = clock::now()) - t0 < std::chrono::milliseconds(2)) {
        }
        const std::uint64_t k1 = now();
        const double s = std::chrono::duration<double>(t1 - t0).count();
        return k1 > k0 ? s / static_cast<double>(k1 - k0) : 1e-9;
#else
        return std::chrono::duration<double>(std::chrono::steady_clock::duration(1)).count();
#endif
    }
};

//! Seconds since the start of an iteration, from tick_clock's ticks.
struct iteration_clock {
    std::uint64_t t0 = 0;  //!< tick_clock at the start of the iteration
    double spt = 0;        //!< seconds per tick

    void start()
    {
        spt = tick_clock::seconds_per_tick();
        t0 = tick_clock::now();
    }
    double seconds(std::uint64_t tick) const noexcept
    {
        // Signed: TSCs of different cores may differ by a few ticks.
        return static_cast<double>(static_cast<std::int64_t>(tick - t0)) * spt;
    }
    double now() const noexcept { return seconds(tick_clock::now()); }
};

} // namespace tpipe::detail
