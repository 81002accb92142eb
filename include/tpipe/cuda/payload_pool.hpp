#pragma once
// tpipe::cuda::payload_pool: what a peer or NCCL transport is given to make the payloads a rank
// receives. The transport holds it by reference and passes it, unopened, to
// device_payload_traits<T>::make(header, pool) (tpipe/transport/device_payload_traits.hpp); what it must do is
// the payload type's business, checked per boundary type by tpipe::device_payload<T, Pool>.
// So the concept asks only for an object the transport can refer to: not a reference, not const
// (make allocates from it). Models: tpipe::cuda::memory_pool, the tests' fake host pools.
#include <type_traits>

namespace tpipe::cuda {

template <class P>
concept payload_pool = std::is_object_v<P> && !std::is_const_v<P>;

} // namespace tpipe::cuda
