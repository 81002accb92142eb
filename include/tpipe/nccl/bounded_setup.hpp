#pragma once
// tpipe::nccl::detail::bounded_call: runs a blocking NCCL set-up call (ncclCommInitRank,
// ncclCommSplit: every member must make it, and NCCL may wait for a missing one without end) under
// a set-up bound that `bound` declares, `bound.bounded_setup(what, call)` (tpipe::mpi::setup_bound,
// and tpipe::mpi::transport as a transport's control plane, poll it against the MPI environment's
// set-up bound and name a member that never arrives), else on this thread. Bounded, the call may
// run on a thread of its own, with a copy of the api and this thread's GPU made current there: NCCL
// binds a communicator to the calling thread's GPU.
#include <utility>

#include "tpipe/cuda/driver.hpp"
#include "tpipe/nccl/api.hpp"

namespace tpipe::nccl {

//! Something that bounds blocking set-up calls (see above).
template <class B>
concept bounds_setup = requires(B& b) { b.bounded_setup("", [] { return 0; }); };

namespace detail {

//! `call(api)` under `bound`'s set-up bound where it declares one (bounds_setup), else here.
template <api Api, class Bound, class Call>
auto bounded_call(Api& api, Bound& bound, const char* what, Call call)
{
    if constexpr (bounds_setup<Bound>) {
        auto& d = api.driver();
        int gpu = 0;
        cuda::detail::check(d, d.get_device(&gpu), "cudaGetDevice", what);
        return bound.bounded_setup(what, [api, gpu, call = std::move(call)]() mutable {
            cuda::detail::device_scope<typename Api::driver_type> on_gpu(api.driver(), gpu);
            return call(api);
        });
    } else {
        return call(api);
    }
}

//! ncclCommInitRank as member `rank` of `n` with `id`, under `bound` (bounded_call): NCCL's
//! result code and the communicator.
template <api Api, class Bound>
std::pair<int, typename Api::comm_t> bounded_init_rank(Api& api, Bound& bound, const char* what, int n, const unique_id& id, int rank)
{
    return bounded_call(api, bound, what, [n, id, rank](Api& on) {
        typename Api::comm_t out{};
        const int r = on.init_rank(out, n, id, rank);
        return std::pair{r, out};
    });
}

} // namespace detail
} // namespace tpipe::nccl
