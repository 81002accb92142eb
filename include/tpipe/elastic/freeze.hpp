#pragma once
// AutoFreeze: at the start of each freeze interval (epoch), how many leading layers are frozen.
// Freezing is always a prefix: "F frozen" means layers 0..F-1 (and whatever precedes layer 0,
// such as an embedding). The head is the model's tail after the L counted layers (final norm,
// classifier); F counts layers only, so the head is never frozen. `max_frozen` < L keeps
// trailing layers trainable as well (L - 1 keeps the last layer).
//
// A policy is any type with `int next_frozen(const freeze_observation&)`; two ship here:
//   progressive_freeze  F(e) = ceil(L (1 - (1 - alpha)^e)), the released code's schedule, exact.
//   paper_freeze        the paper's Eq. 1: min(F + ceil(alpha (L - F)), argmin of the gradient
//                       norm over the active layers + 1), never below F.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <span>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/elastic/detail/exact_power.hpp"
#include "tpipe/elastic/fraction.hpp"

namespace tpipe::elastic {

//! What a policy sees when it decides the frozen count for `epoch`.
struct freeze_observation {
    int epoch = 0;                       //!< the interval about to start (0 = the first)
    int layers = 1;                      //!< L, the freezable layers of the model
    int frozen = 0;                      //!< F of the previous interval
    int max_frozen = -1;                 //!< most layers that may freeze; -1 means L
    std::span<const double> grad_norms;  //!< per layer (size L), the L2 norm of the layer's whole
                                         //!< gradient over the last interval; empty if unknown

    constexpr int cap() const { return max_frozen < 0 ? layers : max_frozen; }
};

template <class P>
concept freeze_policy = requires(P& p, const freeze_observation& o) {
    { p.next_frozen(o) } -> std::convertible_to<int>;
};

} // namespace tpipe::elastic

namespace tpipe::detail {
inline void check_observation(const elastic::freeze_observation& o)
{
    require(o.layers >= 1, "freeze: layers must be >= 1, got " + std::to_string(o.layers));
    require(o.epoch >= 0, "freeze: epoch must be >= 0, got " + std::to_string(o.epoch));
    require(o.cap() >= 0 && o.cap() <= o.layers, "freeze: max_frozen must lie in [0, layers = " +
                                                     std::to_string(o.layers) + "], got " +
                                                     std::to_string(o.max_frozen));
    require(o.frozen >= 0 && o.frozen <= o.cap(), "freeze: frozen must lie in [0, max_frozen = " +
                                                      std::to_string(o.cap()) + "], got " + std::to_string(o.frozen));
    require(o.grad_norms.empty() || o.grad_norms.size() == static_cast<std::size_t>(o.layers),
            "freeze: grad_norms must be empty or hold one norm per layer (" + std::to_string(o.layers) + "), got " +
                std::to_string(o.grad_norms.size()));
    for (double g : o.grad_norms)
        require(std::isfinite(g) && g >= 0, "freeze: gradient norms must be finite and >= 0, got " + std::to_string(g));
}
} // namespace tpipe::detail

namespace tpipe::elastic {

//! Asks `policy` and checks its answer: monotone (>= the previous F) and within max_frozen.
template <freeze_policy P>
int next_frozen(P& policy, const freeze_observation& o)
{
    detail::check_observation(o);
    const int f = policy.next_frozen(o);
    if (f < o.frozen || f > o.cap())
        throw error("freeze policy answered " + std::to_string(f) + " frozen layers; it must lie in [previous F = " +
                    std::to_string(o.frozen) + ", max_frozen = " + std::to_string(o.cap()) + "]");
    return f;
}

//! F(e) = ceil(L (1 - (1 - alpha)^e)), capped at max_frozen: what the released code computes
//! (in floating point there; here exactly, so L = 12, alpha = 1/3 gives F(1) = 4, not 5).
//! Ignores gradients. Monotone in e because (1 - alpha)^e is non-increasing.
class progressive_freeze {
public:
    explicit progressive_freeze(fraction alpha) : alpha_(alpha) {}

    //! F(e) for a model of `layers` layers, before the cap.
    int closed_form(int layers, int epoch) const
    {
        // ceil(L - L r^e) = L - floor(L r^e), r = (den - num) / den.
        return layers - static_cast<int>(detail::floor_scaled_power(layers, alpha_.den - alpha_.num, alpha_.den, epoch));
    }
    int next_frozen(const freeze_observation& o) const
    {
        return std::max(o.frozen, std::min(o.cap(), closed_form(o.layers, o.epoch)));
    }
    fraction alpha() const { return alpha_; }

private:
    fraction alpha_;
};

//! The paper's rule, with the ambiguities settled: the candidate is one past the active layer
//! (index >= F) of smallest gradient L2 norm (ties: the lowest layer), i.e. freeze up to and
//! including it; the bound F + alpha (L - F) is rounded up exactly (F + ceil(num (L - F) / den)).
//! Epoch 0 freezes nothing. Without gradient norms only the bound applies: that is the integer
//! recursion F <- F + ceil(alpha (L - F)), which runs ahead of the closed form (L = 12,
//! alpha = 1/3: 0 4 7 9 10 11 12 against 0 4 7 9 10 11 11 12).
class paper_freeze {
public:
    explicit paper_freeze(fraction alpha) : alpha_(alpha) {}

    int bound(int layers, int frozen) const
    {
        const std::int64_t active = layers - frozen;
        return frozen + static_cast<int>((alpha_.num * active + alpha_.den - 1) / alpha_.den);
    }
    int next_frozen(const freeze_observation& o) const
    {
        if (o.epoch == 0 || o.frozen >= o.cap()) return o.frozen;
        int f = bound(o.layers, o.frozen);
        if (!o.grad_norms.empty()) {
            const auto active = o.grad_norms.subspan(static_cast<std::size_t>(o.frozen));
            const auto lowest = std::min_element(active.begin(), active.end()) - active.begin();
            f = std::min(f, o.frozen + static_cast<int>(lowest) + 1);
        }
        return std::max(o.frozen, std::min(o.cap(), f));
    }
    fraction alpha() const { return alpha_; }

private:
    fraction alpha_;
};

//! The most epochs a freeze schedule or an elastic plan covers: each epoch is an entry (and, for
//! a plan, a re-plan), and no training runs anywhere near this many.
inline constexpr int max_planned_epochs = 100'000;

//! F for epochs 0..epochs-1 from a policy that needs no gradients (or treats none as none).
template <freeze_policy P>
std::vector<int> freeze_schedule(P& policy, int layers, int epochs, int max_frozen = -1)
{
    detail::require(epochs >= 1, "freeze: epochs must be >= 1, got " + std::to_string(epochs));
    detail::require(epochs <= max_planned_epochs,
                    "freeze: " + std::to_string(epochs) + " epochs; a schedule is planned for at most " +
                        std::to_string(max_planned_epochs) + " (one entry per epoch, and more than any training runs)");
    std::vector<int> out;
    int f = 0;
    for (int e = 0; e < epochs; ++e) {
        f = next_frozen(policy, freeze_observation{e, layers, f, max_frozen, {}});
        out.push_back(f);
    }
    return out;
}

} // namespace tpipe::elastic
