#pragma once
// tpipe::group_cancelling_communicator: a communicator whose members can all be cancelled from
// one of them (members on threads of one process: no transport tells them of each other's
// failures). The communicator opts in explicitly:
//
//   static constexpr bool tpipe_group_cancelling_communicator = true;  // in the class (inherited), or
//   template <> inline constexpr bool tpipe::enable_group_cancelling_communicator<my_comm> = true;
//
// and then must have
//   void cancel_group() noexcept;  // any thread: cancel() of every member of the group
//
// A communicator that declares it with another signature (or a misspelled name) does not
// compile: tpipe::data_parallel names the member and the signature expected. Default (not
// declared: tpipe::mpi::communicator, tpipe::nccl::communicator, whose members in other
// processes learn of a failure through the transport): cancel() of this member only. Model:
// tpipe::thread_communicator.
#include <concepts>

#include "tpipe/comm/communicator.hpp"

namespace tpipe {

//! Whether C declares the capability (see above): its tpipe_group_cancelling_communicator, else false; or specialised.
template <class C>
inline constexpr bool enable_group_cancelling_communicator = requires { requires C::tpipe_group_cancelling_communicator; };

//! A communicator that declares enable_group_cancelling_communicator and has cancel_group().
template <class C>
concept group_cancelling_communicator = communicator<C> && enable_group_cancelling_communicator<C> && requires(C& c) {
    { c.cancel_group() } noexcept -> std::same_as<void>;
};

namespace detail {
//! True; a compile error naming the member when C declares the capability with a wrong member.
template <class C>
consteval bool check_group_cancelling_communicator()
{
    if constexpr (enable_group_cancelling_communicator<C>)
        static_assert(requires(C& c) {
            { c.cancel_group() } noexcept -> std::same_as<void>;
        }, "this communicator declares tpipe::enable_group_cancelling_communicator, so it must have "
           "`void cancel_group() noexcept`");
    return true;
}
} // namespace detail

//! Cancels every member of c's group (group_cancelling_communicator); otherwise c's own member.
template <communicator C>
void cancel_group_of(C& c) noexcept
{
    static_assert(detail::check_group_cancelling_communicator<C>());
    if constexpr (group_cancelling_communicator<C>) c.cancel_group();
    else c.cancel();
}

} // namespace tpipe
