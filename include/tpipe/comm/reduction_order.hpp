#pragma once
// tpipe::reduction_order and the ring order: the ONE definition of the order in which a sum
// all-reduce adds the members' values. tpipe::thread_communicator and tpipe::mpi::communicator
// both implement it, so the same program on threads and on processes gives the same bits.
//
// The ring order (reduction_order::ring, the default)
// - The n elements are cut into d segments, one per member, in rank order and balanced: segment
//   s holds n / d elements, plus one if s < n % d (ring_segment). Segments may be empty (n < d).
// - Every element of segment s is the left fold, in T, of the members' values in ring order
//   starting after s and ending at s:
//       ((x[s+1] + x[s+2]) + ... + x[d-1]) + x[0] + ... + x[s]        (member indices mod d)
//   (ring_addend(s, d, j) is the j-th addend). This is the order a ring reduce-scatter adds in:
//   member s+1 sends its piece of segment s to s+2, which adds its own and passes it on, until
//   member s adds the last value and owns the sum; an all-gather then copies it to everyone.
//   Chunking a segment into pieces (pipelining) does not change any element's order.
// - For d <= 2 it equals the rank-order fold (a + b == b + a bitwise); so it does for integers.
// - The segments are cut from the buffer one call gets: reducing a vector in two calls (per
//   stage, per bucket) gives other bits than in one. The rank-order fold has no such cut.
//
// reduction_order::rank_order is the left fold in rank order ((x0 + x1) + x2) + ..., for every
// element (tpipe's order before the ring; one member receives (d - 1) times the data).
// reduction_order::native is the implementation's own collective (MPI_Iallreduce): the same
// bits on every member where the implementation guarantees it, in an order tpipe does not define.
#include <algorithm>
#include <cstddef>
#include <span>

namespace tpipe {

//! How a communicator's all_reduce_sum orders its additions (see the file comment).
enum class reduction_order : unsigned char { ring, rank_order, native };

inline const char* to_string(reduction_order o) noexcept
{
    switch (o) {
    case reduction_order::ring: return "ring";
    case reduction_order::rank_order: return "rank_order";
    default: return "native";
    }
}

//! Elements [begin, begin + size) of a buffer.
struct element_range {
    std::size_t begin = 0, size = 0;
    friend bool operator==(const element_range&, const element_range&) = default;
};

//! Segment s of n elements cut into d balanced segments (the first n % d hold one more).
constexpr element_range ring_segment(std::size_t n, int d, int s) noexcept
{
    const std::size_t D = static_cast<std::size_t>(d), S = static_cast<std::size_t>(s);
    const std::size_t base = n / D, extra = n % D;
    return {S * base + (S < extra ? S : extra), base + (S < extra ? 1 : 0)};
}

//! The member whose value is the j-th addend (j = 0..d-1) of every element of segment s.
constexpr int ring_addend(int s, int d, int j) noexcept { return (s + 1 + j) % d; }

//! Segment s of the ring-order sum of the d members' inputs (each of n elements), written to
//! out[seg.begin .. seg.begin + seg.size). `out` may alias an input: each element is read from
//! every member before it is written.
template <class T>
void ring_segment_sum(std::span<const T* const> inputs, std::size_t n, int s, T* out) noexcept
{
    const int d = static_cast<int>(inputs.size());
    const element_range seg = ring_segment(n, d, s);
    constexpr std::size_t block = 512;  // per block, addend by addend: vectorisable, same order per element
    T acc[block];
    for (std::size_t b = seg.begin; b < seg.begin + seg.size; b += block) {
        const std::size_t len = std::min(block, seg.begin + seg.size - b);
        const T* first = inputs[static_cast<std::size_t>(ring_addend(s, d, 0))] + b;
        for (std::size_t e = 0; e < len; ++e) acc[e] = first[e];
        for (int j = 1; j < d; ++j) {
            const T* in = inputs[static_cast<std::size_t>(ring_addend(s, d, j))] + b;
            for (std::size_t e = 0; e < len; ++e) acc[e] += in[e];
        }
        for (std::size_t e = 0; e < len; ++e) out[b + e] = acc[e];
    }
}

//! The whole ring-order sum computed sequentially into out (of the inputs' size; may alias one):
//! the reference both models are tested against, and what thread_communicator computes.
template <class T>
void ring_order_sum(std::span<const T* const> inputs, std::span<T> out) noexcept
{
    for (int s = 0; s < static_cast<int>(inputs.size()); ++s) ring_segment_sum<T>(inputs, out.size(), s, out.data());
}

} // namespace tpipe
