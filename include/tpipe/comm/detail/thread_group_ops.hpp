#pragma once
// What the members of a tpipe::thread_group (tpipe/comm/thread_communicator.hpp) hand to its
// shared state (comm/detail/thread_group_state.hpp): the records of a suspended collective,
// receive or message, and the reduction the last member to arrive computes. Not for direct use.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tpipe/async/loop.hpp"
#include "tpipe/comm/communicator.hpp"
#include "tpipe/comm/reduction_order.hpp"

namespace tpipe {
namespace detail::tc {

enum class kind : unsigned char { all_reduce, reduce_scatter, all_gather, broadcast, barrier };
enum class elem : unsigned char { none, f32, f64, i32, i64 };

template <reducible T>
constexpr elem elem_of = std::is_same_v<T, float>          ? elem::f32
                         : std::is_same_v<T, double>       ? elem::f64
                         : std::is_same_v<T, std::int32_t> ? elem::i32
                                                           : elem::i64;

inline const char* elem_name(elem e) noexcept
{
    switch (e) {
    case elem::f32: return "float";
    case elem::f64: return "double";
    case elem::i32: return "int32";
    case elem::i64: return "int64";
    default: return "byte";
    }
}

//! A suspended operation of one member; lives in its awaiter.
struct waiter {
    wake_node node{};
    loop* where = nullptr;  //!< nullptr: a plain thread blocked on the group's condition
    bool done = false;      //!< for a blocked plain thread
    std::exception_ptr error{};
};

struct collective_op : waiter {
    kind what = kind::barrier;
    elem type = elem::none;
    std::byte* data = nullptr;
    std::size_t count = 0;  //!< elements (bytes for broadcast)
    int root = 0;
    reduction_order order = reduction_order::ring;  //!< all_reduce only
};

struct recv_op : waiter {
    recv_op* next = nullptr;
    int source = 0, tag = 0;
    std::span<std::byte> bytes{};
};

struct message {
    message* next = nullptr;
    int source = 0, tag = 0;
    std::vector<std::byte> data;
};

struct slot {
    bool used = false, completing = false;
    bool cancelled = false;  //!< a member that had arrived was cancelled: the collective cannot complete
    std::uint64_t seq = 0;
    int arrived = 0;
    collective_op first{};  //!< the signature of the first arrival (for mismatch messages)
    int first_member = 0;
    std::string error;
    std::vector<collective_op*> ops;  //!< by member; sized once
};

struct member_state {
    std::uint64_t seq = 0;        //!< next collective sequence number
    std::uint64_t iteration = 0;  //!< resets so far: the iteration this member is in
    bool cancelled = false;
    recv_op* recv_head = nullptr;
    recv_op* recv_tail = nullptr;
    message* msg_head = nullptr;
    message* msg_tail = nullptr;
};

inline std::string describe(const collective_op& op)
{
    switch (op.what) {
    case kind::all_reduce:
        return "all_reduce_sum of " + std::to_string(op.count) + " " + elem_name(op.type) + " (" + to_string(op.order) + " order)";
    case kind::reduce_scatter: return "reduce_scatter_sum of " + std::to_string(op.count) + " " + elem_name(op.type);
    case kind::all_gather: return "all_gather of " + std::to_string(op.count) + " " + elem_name(op.type);
    case kind::broadcast:
        return "broadcast of " + std::to_string(op.count) + " bytes from root " + std::to_string(op.root);
    default: return "barrier";
    }
}

inline std::size_t elem_size(elem e) noexcept { return e == elem::f32 || e == elem::i32 ? 4 : 8; }

//! The reduction of an all-reduce or reduce-scatter, by the last member to arrive: the rank-order
//! fold into member 0's span, or the ring order (tpipe/comm/reduction_order.hpp) into member 0's
//! span (all-reduce) or into each member's own segment (reduce-scatter).
template <class T>
void reduce(const std::vector<collective_op*>& ops, const collective_op& op)
{
    const std::size_t n = op.count;
    T* out = reinterpret_cast<T*>(ops[0]->data);
    if (op.what == kind::all_reduce && op.order == reduction_order::rank_order) {
        for (std::size_t r = 1; r < ops.size(); ++r) {
            const T* in = reinterpret_cast<const T*>(ops[r]->data);
            for (std::size_t k = 0; k < n; ++k) out[k] += in[k];
        }
        return;
    }
    constexpr std::size_t inline_members = 16;
    const T* small[inline_members];
    std::vector<const T*> large;  // only for groups of more than 16 members
    const T** in = small;
    if (ops.size() > inline_members) {
        large.resize(ops.size());
        in = large.data();
    }
    for (std::size_t r = 0; r < ops.size(); ++r) in[r] = reinterpret_cast<const T*>(ops[r]->data);
    const std::span<const T* const> inputs(in, ops.size());
    for (int s = 0; s < static_cast<int>(ops.size()); ++s)
        ring_segment_sum<T>(inputs, n, s, op.what == kind::all_reduce ? out : reinterpret_cast<T*>(ops[static_cast<std::size_t>(s)]->data));
}

} // namespace detail::tc
} // namespace tpipe
