#pragma once
// The quantity every planner plans with: t(b, s, c), one stage's time in seconds for one unit
// of b rows, s tokens and c tokens of attention context (forward + backward + transfer).
// Any type with `double seconds(b, s, c) const` is a latency model; the planners take it by
// concept, and `any_latency` erases the type where the model is chosen at run time (CLI).
#include <cmath>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "tpipe/core/error.hpp"

namespace tpipe {

//! A latency model: one stage's time in seconds for a unit of b rows, s tokens, c context.
template <class M>
concept latency_model = requires(const M& m, std::int64_t b, std::int64_t s, std::int64_t c) {
    { m.seconds(b, s, c) } -> std::convertible_to<double>;
};

//! A latency model that also promises t is non-decreasing in s for fixed (b, c). Planners may
//! use the promise to stop scanning early; they also verify it on the values they use.
template <class M>
concept token_monotone_latency_model = latency_model<M> && requires(const M& m) {
    { m.monotone_in_tokens() } -> std::convertible_to<bool>;
};

//! A type-erased latency model (copyable, shares the wrapped model).
class any_latency {
public:
    any_latency() = default;

    template <latency_model M>
        requires(!std::same_as<std::remove_cvref_t<M>, any_latency>)
    any_latency(M model) // NOLINT: implicit on purpose, any model converts
        : self_(std::make_shared<holder<M>>(std::move(model)))
    {
    }

    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        if (!self_) detail::refuse("any_latency: no model was assigned");
        return self_->seconds(b, s, c);
    }
    bool has_value() const { return static_cast<bool>(self_); }
    //! The wrapped model if it is an M (to list what an analytic model uses), else null.
    template <class M>
    const M* get() const
    {
        const auto* h = dynamic_cast<const holder<M>*>(self_.get());
        return h ? &h->model : nullptr;
    }

private:
    struct base {
        virtual ~base() = default;
        virtual double seconds(std::int64_t, std::int64_t, std::int64_t) const = 0;
    };
    template <class M>
    struct holder final : base {
        explicit holder(M m) : model(std::move(m)) {}
        double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const override
        {
            return static_cast<double>(model.seconds(b, s, c));
        }
        M model;
    };
    std::shared_ptr<const base> self_;
};

//! A callable that prices a unit: fn(b, s, c) -> seconds.
template <class F>
concept latency_function = std::regular_invocable<const F&, std::int64_t, std::int64_t, std::int64_t> &&
                           std::convertible_to<std::invoke_result_t<const F&, std::int64_t, std::int64_t, std::int64_t>,
                                               double>;

//! Wraps a callable `double(b, s, c)` as a latency model.
template <latency_function F>
struct function_latency {
    F fn;
    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const { return static_cast<double>(fn(b, s, c)); }
};
template <class F>
function_latency(F) -> function_latency<F>;

namespace detail {
//! Refuses a unit shape outside the domain every model shares (b >= 1, s >= 1, c >= 0).
inline void require_unit_shape(std::int64_t b, std::int64_t s, std::int64_t c, const char* model)
{
    if (b < 1 || s < 1 || c < 0)
        refuse(std::string(model) + ": a unit needs b >= 1 rows, s >= 1 tokens and c >= 0 context, got b=" +
               std::to_string(b) + " s=" + std::to_string(s) + " c=" + std::to_string(c));
}

//! Refuses a latency that is negative or NaN (+inf is allowed: "this unit cannot run").
inline double checked_time(double t, std::int64_t b, std::int64_t s, std::int64_t c)
{
    if (std::isnan(t) || t < 0)
        refuse("latency model returned " + std::to_string(t) + " s for (b=" + std::to_string(b) +
               ", s=" + std::to_string(s) + ", c=" + std::to_string(c) +
               "); unit times must be >= 0 (or +inf for a unit that cannot run)");
    return t;
}
} // namespace detail

} // namespace tpipe
