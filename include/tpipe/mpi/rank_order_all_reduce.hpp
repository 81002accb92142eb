#pragma once
// tpipe::mpi::communicator's all-reduce in reduction_order::rank_order: MPI_Igather to rank 0,
// the rank-order fold ((x0 + x1) + x2) + ... on rank 0, then MPI_Ibcast, chunk by chunk
// (chunk_bytes per member), four chunks in flight (rank 0 buffers 4 * size chunks). The
// order tpipe used before the ring; rank 0 receives (size - 1) times the data.
#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>

#include "tpipe/mpi/collective_op.hpp"

namespace tpipe::mpi::detail {

//! All-reduce in chunks, `window` of them in flight: the gathers of the first window are posted
//! at once (the progress thread moves them while the loop computes); each time the gather of
//! chunk k has completed, rank 0 folds it and every rank posts the broadcast of chunk k and then
//! the gather of chunk k + window. Every rank posts the same sequence g0..g(w-1), b0, gw, b1,
//! g(w+1), ..., as MPI requires of collectives on one communicator.
template <class T>
class rank_order_all_reduce {
public:
    static constexpr std::size_t window = 4;

    rank_order_all_reduce(comm_state* s, std::span<T> v) noexcept : s_(s), v_(v)
    {
        chunk_ = std::max<std::size_t>(1, s->chunk_bytes / sizeof(T));
        chunks_ = (v.size() + chunk_ - 1) / chunk_;
    }

private:
    std::size_t count_of(std::size_t k) const noexcept { return std::min(chunk_, v_.size() - k * chunk_); }
    T* scratch_of(std::size_t k) noexcept
    {
        return reinterpret_cast<T*>(s_->scratch.data()) + (k % window) * static_cast<std::size_t>(s_->size) * chunk_;
    }

    int post_gather(std::size_t k) noexcept
    {
        const int count = static_cast<int>(count_of(k));
        T* recv = s_->rank == 0 ? scratch_of(k) : nullptr;
        return MPI_Igather(v_.data() + k * chunk_, count, datatype<T>(), recv, count, datatype<T>(), 0, s_->comm, &gathers_[k % window]);
    }

public:
    //! Tests and posts what it can; sets `finished` once done. Returns an MPI error code.
    int drive(bool& finished) noexcept
    {
        if (!posted_first_) {
            posted_first_ = true;
            if (s_->rank == 0) {
                const std::size_t need = std::min(window, chunks_) * static_cast<std::size_t>(s_->size) * chunk_ * sizeof(T);
                if (s_->scratch.size() < need) {
                    try {
                        s_->scratch.resize(need);
                    } catch (...) {
                        return MPI_ERR_NO_MEM;
                    }
                }
            }
            for (; gathered_ < std::min(window, chunks_); ++gathered_)
                if (const int rc = post_gather(gathered_); rc != MPI_SUCCESS) return rc;
        }
        while (folded_ < chunks_) {
            const std::size_t k = folded_, slot = k % window;
            int flag = 0;
            if (const int rc = MPI_Test(&broadcasts_[slot], &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
            if (const int rc = MPI_Test(&gathers_[slot], &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
            T* out = v_.data() + k * chunk_;
            const std::size_t count = count_of(k);
            if (s_->rank == 0) {  // the rank-order fold, as tpipe::thread_communicator does it
                const T* in = scratch_of(k);
                std::memcpy(out, in, count * sizeof(T));
                for (std::size_t r = 1; r < static_cast<std::size_t>(s_->size); ++r)
                    for (std::size_t e = 0; e < count; ++e) out[e] += in[r * count + e];
            }
            if (const int rc = MPI_Ibcast(out, static_cast<int>(count), datatype<T>(), 0, s_->comm, &broadcasts_[slot]); rc != MPI_SUCCESS)
                return rc;
            ++folded_;
            if (gathered_ < chunks_) {
                if (const int rc = post_gather(gathered_); rc != MPI_SUCCESS) return rc;
                ++gathered_;
            }
        }
        for (auto& b : broadcasts_) {
            int flag = 0;
            if (const int rc = MPI_Test(&b, &flag, MPI_STATUS_IGNORE); rc != MPI_SUCCESS || !flag) return rc;
        }
        finished = true;
        return MPI_SUCCESS;
    }

private:
    comm_state* s_;
    std::span<T> v_;
    std::size_t chunk_ = 1, chunks_ = 0;
    std::size_t gathered_ = 0;  //!< gathers posted
    std::size_t folded_ = 0;    //!< chunks folded and broadcast posted
    bool posted_first_ = false;
    MPI_Request gathers_[window] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Request broadcasts_[window] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

} // namespace tpipe::mpi::detail
