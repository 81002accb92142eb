#pragma once
// tpipe::averaging_communicator: a communicator that averages across its members itself (NCCL's
// ncclAvg: the values are device memory the host cannot scale). The communicator opts in
// explicitly:
//
//   static constexpr bool tpipe_averaging_communicator = true;  // in the class (inherited), or
//   template <> inline constexpr bool tpipe::enable_averaging_communicator<my_comm> = true;
//
// and then must have, for float and double spans (like all_reduce_sum),
//   awaitable all_reduce_average(std::span<T> values);  // the sum divided by size(), on every member
//
// A communicator that declares it with another signature (or a misspelled name) does not
// compile: tpipe::data_parallel names the member and the signature expected. Default (not
// declared: tpipe::thread_communicator, tpipe::mpi::communicator): all_reduce_sum, then the host
// multiplies by 1 / size() on every member alike. Model: tpipe::nccl::communicator.
#include <span>

#include "tpipe/comm/communicator.hpp"

namespace tpipe {

//! Whether C declares the capability (see above): its tpipe_averaging_communicator, else false; or specialised.
template <class C>
inline constexpr bool enable_averaging_communicator = requires { requires C::tpipe_averaging_communicator; };

//! A communicator that declares enable_averaging_communicator and has all_reduce_average.
template <class C>
concept averaging_communicator =
    communicator<C> && enable_averaging_communicator<C> && requires(C& c, std::span<float> f, std::span<double> d) {
        { c.all_reduce_average(f) } -> awaitable_of<void>;
        { c.all_reduce_average(d) } -> awaitable_of<void>;
    };

namespace detail {
//! True; a compile error naming the member when C declares the capability with a wrong member.
template <class C>
consteval bool check_averaging_communicator()
{
    if constexpr (enable_averaging_communicator<C>)
        static_assert(requires(C& c, std::span<float> f, std::span<double> d) {
            { c.all_reduce_average(f) } -> awaitable_of<void>;
            { c.all_reduce_average(d) } -> awaitable_of<void>;
        }, "this communicator declares tpipe::enable_averaging_communicator, so it must have "
           "`all_reduce_average(std::span<T>)` for T = float and double, returning an awaitable of void");
    return true;
}
} // namespace detail

} // namespace tpipe
