#pragma once
// tpipe::nccl::api: the NCCL calls tpipe's NCCL communicator and channels make, as a concept, so
// that their logic (grouping, ordering, completion, cancellation, error reports) is built and
// tested without NCCL or a GPU: tpipe::nccl::runtime_api (tpipe/nccl/runtime_api.hpp) is the real
// one, tests/nccl/fake_nccl.hpp an in-process NCCL over threads that enforces NCCL's rules. No
// NCCL or CUDA include here.
//
// Streams are not NCCL's: an api derives from tpipe::nccl::device_calls<driver_type>
// (tpipe/nccl/device_calls.hpp), which makes its streams, markers, awaitables, buffers and copies
// of the CUDA engine's driver seam (tpipe::cuda::driver). So the real api's stream work is the
// engine's, and the fake NCCL launches its kernels on the streams of the engine's test double.
//
// Result codes are ints: 0 is success, anything else NCCL's code (ncclResult_t), which
// describe() turns into text. Buffers are device memory for the real api (host memory for the
// fake).
//
//   comm_t                                an opaque handle
//   get_unique_id(id), init_rank(out, n, id, rank), split(c, color, key, out)
//   rank_of(c), size_of(c)                ncclCommUserRank, ncclCommCount
//   group_start(), group_end()            calls in between are issued at group_end
//   send(buf, bytes, peer, c, s), recv(buf, bytes, peer, c, s)
//   all_reduce(in, out, count, type, op, c, s), broadcast(in, out, bytes, root, c, s)
//   async_error(c)                        ncclCommGetAsyncError: 0 while healthy
//   abort(c), destroy(c)                  noexcept; abort may run on any thread
//   describe(rc, c)                       NCCL's name and reason (and ncclGetLastError)
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "tpipe/comm/communicator.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/nccl/device_calls.hpp"

namespace tpipe::nccl {

//! The reductions tpipe uses (ncclSum, ncclAvg).
enum class redop : unsigned char { sum, average };

//! Element types of reductions (the subset of ncclDataType_t tpipe uses); bytes for p2p.
enum class dtype : unsigned char { f32, f64, i32, i64, bytes };

using tpipe::reducible;  // comm/communicator.hpp: the element types every communicator reduces

template <class T>
    requires reducible<T>
inline constexpr dtype dtype_of = std::is_same_v<T, float>          ? dtype::f32
                                  : std::is_same_v<T, double>       ? dtype::f64
                                  : std::is_same_v<T, std::int32_t> ? dtype::i32
                                                                    : dtype::i64;

inline const char* dtype_name(dtype t) noexcept
{
    switch (t) {
    case dtype::f32: return "float";
    case dtype::f64: return "double";
    case dtype::i32: return "int32";
    case dtype::i64: return "int64";
    default: return "byte";
    }
}

//! ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES = 128): what rank 0 makes and every member needs.
struct unique_id {
    std::array<std::byte, 128> bytes{};
    friend bool operator==(const unique_id&, const unique_id&) = default;
};

template <class A>
concept api =
    std::copy_constructible<A> && cuda::driver<typename A::driver_type> &&
    std::derived_from<A, device_calls<typename A::driver_type>> &&
    requires(A& a, typename A::comm_t c, typename A::comm_t& out, typename A::stream_t s, const void* in, void* o,
             std::size_t n, int i, dtype t, redop op, unique_id& id, const unique_id& cid) {
        { a.get_unique_id(id) } -> std::same_as<int>;
        { a.init_rank(out, i, cid, i) } -> std::same_as<int>;
        { a.split(c, i, i, out) } -> std::same_as<int>;
        { a.rank_of(c) } -> std::same_as<int>;
        { a.size_of(c) } -> std::same_as<int>;
        { a.group_start() } -> std::same_as<int>;
        { a.group_end() } -> std::same_as<int>;
        { a.send(in, n, i, c, s) } -> std::same_as<int>;
        { a.recv(o, n, i, c, s) } -> std::same_as<int>;
        { a.all_reduce(in, o, n, t, op, c, s) } -> std::same_as<int>;
        { a.broadcast(in, o, n, i, c, s) } -> std::same_as<int>;
        { a.async_error(c) } -> std::same_as<int>;
        { a.abort(c) } noexcept;
        { a.destroy(c) } noexcept;
        { a.describe(i, c) } -> std::convertible_to<std::string>;
    };

} // namespace tpipe::nccl
