#pragma once
// tpipe::nccl::runtime_api: the real tpipe::nccl::api (tpipe/nccl/api.hpp) over NCCL, its streams,
// markers and buffers the CUDA runtime's driver seam (tpipe::nccl::device_calls over
// tpipe::cuda::runtime_driver, with the process-wide event pool of tpipe::cuda::after), so NCCL
// work is awaited like any other stream work, from the loop, never on a driver thread.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/runtime_driver.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/device_calls.hpp"
#include "tpipe/nccl/error_macros.hpp"

namespace tpipe::nccl {

struct runtime_api : device_calls<cuda::runtime_driver> {
    using comm_t = ncclComm_t;

    runtime_api() : device_calls(cuda::runtime_driver::instance(), cuda::default_event_pool()) {}

    static ncclDataType_t nccl_type(dtype t) noexcept
    {
        switch (t) {
        case dtype::f32: return ncclFloat32;
        case dtype::f64: return ncclFloat64;
        case dtype::i32: return ncclInt32;
        case dtype::i64: return ncclInt64;
        default: return ncclUint8;
        }
    }

    //! A fresh ncclUniqueId (rank 0 makes it; the bootstrap hands it to the others).
    static unique_id make_unique_id()
    {
        ncclUniqueId u;
        TPIPE_NCCL_TRY(ncclGetUniqueId(&u));
        unique_id id;
        std::memcpy(id.bytes.data(), &u, sizeof u);
        return id;
    }

    int get_unique_id(unique_id& id) noexcept
    {
        static_assert(sizeof(ncclUniqueId) == sizeof(id.bytes));
        ncclUniqueId u;
        const ncclResult_t rc = ncclGetUniqueId(&u);
        if (rc == ncclSuccess) std::memcpy(id.bytes.data(), &u, sizeof u);
        return rc;
    }
    int init_rank(comm_t& out, int n, const unique_id& id, int rank) noexcept
    {
        ncclUniqueId u;
        std::memcpy(&u, id.bytes.data(), sizeof u);
        return ncclCommInitRank(&out, n, u, rank);
    }
    int split(comm_t c, int color, int key, comm_t& out) noexcept { return ncclCommSplit(c, color, key, &out, nullptr); }
    int rank_of(comm_t c) noexcept
    {
        int r = -1;
        return ncclCommUserRank(c, &r) == ncclSuccess ? r : -1;
    }
    int size_of(comm_t c) noexcept
    {
        int n = -1;
        return ncclCommCount(c, &n) == ncclSuccess ? n : -1;
    }
    int group_start() noexcept { return ncclGroupStart(); }
    int group_end() noexcept { return ncclGroupEnd(); }
    int send(const void* in, std::size_t bytes, int peer, comm_t c, stream_t s) noexcept { return ncclSend(in, bytes, ncclUint8, peer, c, s); }
    int recv(void* out, std::size_t bytes, int peer, comm_t c, stream_t s) noexcept { return ncclRecv(out, bytes, ncclUint8, peer, c, s); }
    int all_reduce(const void* in, void* out, std::size_t n, dtype t, redop op, comm_t c, stream_t s) noexcept
    {
        return ncclAllReduce(in, out, n, nccl_type(t), op == redop::average ? ncclAvg : ncclSum, c, s);
    }
    int broadcast(const void* in, void* out, std::size_t bytes, int root, comm_t c, stream_t s) noexcept
    {
        return ncclBroadcast(in, out, bytes, ncclUint8, root, c, s);
    }
    int async_error(comm_t c) noexcept
    {
        ncclResult_t e = ncclSuccess;
        const ncclResult_t rc = ncclCommGetAsyncError(c, &e);
        return rc != ncclSuccess ? rc : e;
    }
    void abort(comm_t c) noexcept { (void)TPIPE_NCCL_LOG(ncclCommAbort(c)); }
    void destroy(comm_t c) noexcept { (void)TPIPE_NCCL_LOG(ncclCommDestroy(c)); }
    std::string describe(int rc, comm_t c) const
    {
        std::string s = ncclGetErrorString(static_cast<ncclResult_t>(rc));
        if (c) {
            const char* last = ncclGetLastError(c);
            if (last && *last) s += std::string(": ") + last;
        }
        return s + " (ncclResult_t " + std::to_string(rc) + ")";
    }
};
static_assert(api<runtime_api>);

} // namespace tpipe::nccl
