#pragma once
// --link (with --transport mpi): the engine an app's activations and gradients cross processes
// over. MPI keeps the control plane (agreement, failure notices) either way; `ucx` needs the app
// built with -DTPIPE_ENABLE_UCX=ON, which defines TPIPE_APPS_UCX on every translation unit that
// includes this header (so each sees the same link_maker_of).
#include <string>

#include <tpipe/mpi/link.hpp>
#ifdef TPIPE_APPS_UCX
#include <tpipe/ucx/link.hpp>
#endif

namespace tpipe_examples {

//! The link maker of a --link that check_link accepted: MPI's own links (empty) or UCX's.
inline tpipe::mpi::link_maker link_maker_of(const std::string& link)
{
#ifdef TPIPE_APPS_UCX
    if (link == "ucx") return tpipe::ucx::links;
#endif
    (void)link;
    return {};
}

} // namespace tpipe_examples
