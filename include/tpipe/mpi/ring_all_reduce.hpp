#pragma once
// tpipe::mpi::communicator's ring: reduce-scatter and/or all-gather over the members in rank
// order (each sends to rank + 1 and receives from rank - 1), chunked and pipelined. It adds in
// the ring order that tpipe/comm/reduction_order.hpp defines, the order tpipe::thread_communicator
// computes, so threads and processes give the same bits.
//
// How the order comes out: the buffer is cut into size() ring segments, each segment into
// pieces of at most chunk_bytes. At reduce-scatter step t (0 .. size-2) member r sends its
// running sum of segment (r - t - 1) and receives the running sum of segment (r - t - 2) from
// r - 1, adding its own value to it. So segment s starts as x[s+1] on member s+1, gains
// x[s+2], ..., and member s adds x[s] last and owns the sum: ring_addend's order. All-gather
// step t then forwards segment (r - t) around the ring, so every member ends with the owners'
// bits. Each member sends and receives 2 n (size - 1) / size elements (counted in traffic).
//
// Pipelining: `window` pieces are in flight at once, one per slot; slot i carries pieces
// i, i + window, ... one after another, each through all its steps, with MPI tag i on a private
// duplicate communicator. Per (neighbour, tag) both sides therefore post their messages in the
// same order, which MPI's non-overtaking rule matches, also across consecutive collectives.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tpipe/comm/reduction_order.hpp"
#include "tpipe/mpi/collective_op.hpp"

namespace tpipe::mpi::detail {

template <class T>
class ring_all_reduce {
public:
    static constexpr int window = 4;
    enum phase : unsigned { reduce_scatter = 1, all_gather = 2, both = 3 };

    ring_all_reduce(comm_state* s, std::span<T> v, unsigned phases) noexcept : s_(s), v_(v)
    {
        d_ = s->size;
        reduce_steps_ = (phases & reduce_scatter) ? d_ - 1 : 0;
        steps_ = reduce_steps_ + ((phases & all_gather) ? d_ - 1 : 0);
        chunk_ = std::max<std::size_t>(1, s->chunk_bytes / sizeof(T));
        const std::size_t longest = ring_segment(v.size(), d_, 0).size;
        pieces_ = (longest + chunk_ - 1) / chunk_;
    }

    //! Tests and posts what it can; sets `finished` once done. Returns an MPI error code.
    int drive(bool& finished) noexcept
    {
        if (!started_) {
            started_ = true;
            if (steps_ == 0 || pieces_ == 0) {
                finished = true;
                return MPI_SUCCESS;
            }
            const std::size_t need = static_cast<std::size_t>(window) * chunk_ * sizeof(T);
            if (reduce_steps_ > 0 && s_->scratch.size() < need) {
                try {
                    s_->scratch.resize(need);
                } catch (...) {
                    return MPI_ERR_NO_MEM;
                }
            }
            for (int i = 0; i < window && static_cast<std::size_t>(i) < pieces_; ++i) {
                slots_[i].piece = static_cast<std::size_t>(i);
                slots_[i].active = true;
                ++active_;
                if (const int rc = post(i); rc != MPI_SUCCESS) return rc;
            }
        }
        for (int i = 0; i < window; ++i) {
            slot& sl = slots_[i];
            while (sl.active) {
                int flag = 0;
                if (const int rc = MPI_Testall(2, sl.req, &flag, MPI_STATUSES_IGNORE); rc != MPI_SUCCESS) return rc;
                if (!flag) break;
                if (sl.step < reduce_steps_) add(i);
                if (++sl.step == steps_) {
                    sl.step = 0;
                    sl.piece += static_cast<std::size_t>(window);
                    if (sl.piece >= pieces_) {
                        sl.active = false;
                        --active_;
                        break;
                    }
                }
                if (const int rc = post(i); rc != MPI_SUCCESS) return rc;
            }
        }
        finished = active_ == 0;
        return MPI_SUCCESS;
    }

private:
    struct slot {
        std::size_t piece = 0;
        int step = 0;
        bool active = false;
        MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    };

    int mod(int a) const noexcept { return ((a % d_) + d_) % d_; }

    //! Piece `p` of segment `s`: its first element and its size (0 past a short segment's end).
    element_range piece_of(int s, std::size_t p) const noexcept
    {
        const element_range seg = ring_segment(v_.size(), d_, s);
        const std::size_t off = p * chunk_;
        return {seg.begin + std::min(off, seg.size), off < seg.size ? std::min(chunk_, seg.size - off) : 0};
    }

    T* scratch_of(int i) noexcept { return reinterpret_cast<T*>(s_->scratch.data()) + static_cast<std::size_t>(i) * chunk_; }

    //! The segments slot i sends and receives at its current step.
    int send_segment(const slot& sl) const noexcept
    {
        const int r = s_->rank;
        return sl.step < reduce_steps_ ? mod(r - sl.step - 1) : mod(r - (sl.step - reduce_steps_));
    }
    int recv_segment(const slot& sl) const noexcept { return mod(send_segment(sl) - 1); }

    int post(int i) noexcept
    {
        slot& sl = slots_[i];
        const int right = mod(s_->rank + 1), left = mod(s_->rank - 1);
        const element_range out = piece_of(send_segment(sl), sl.piece), in = piece_of(recv_segment(sl), sl.piece);
        T* into = sl.step < reduce_steps_ ? scratch_of(i) : v_.data() + in.begin;
        s_->traffic.sent += out.size * sizeof(T);
        s_->traffic.received += in.size * sizeof(T);
        if (const int rc = MPI_Irecv(into, static_cast<int>(in.size), datatype<T>(), left, i, s_->ring_comm, &sl.req[1]); rc != MPI_SUCCESS)
            return rc;
        return MPI_Isend(v_.data() + out.begin, static_cast<int>(out.size), datatype<T>(), right, i, s_->ring_comm, &sl.req[0]);
    }

    //! The received running sum plus this member's value: acc + x[r], in T.
    void add(int i) noexcept
    {
        const slot& sl = slots_[i];
        const element_range in = piece_of(recv_segment(sl), sl.piece);
        const T* acc = scratch_of(i);
        T* mine = v_.data() + in.begin;
        for (std::size_t e = 0; e < in.size; ++e) mine[e] = acc[e] + mine[e];
    }

    comm_state* s_;
    std::span<T> v_;
    int d_ = 1, reduce_steps_ = 0, steps_ = 0, active_ = 0;
    std::size_t chunk_ = 1, pieces_ = 0;
    bool started_ = false;
    slot slots_[window];
};

} // namespace tpipe::mpi::detail
