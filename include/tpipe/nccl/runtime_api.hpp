#pragma once
// tpipe::nccl::runtime_api: the real tpipe::nccl::api (tpipe/nccl/api.hpp) over NCCL and the CUDA
// runtime. Stateless. Completion markers are events of tpipe::cuda::default_event_pool()
// (tpipe::cuda::peer_runtime's), and
// after() is tpipe::cuda::after (tpipe/cuda/after.hpp), so NCCL work is awaited like any other
// stream work, from the loop, never on a driver thread.
//
// query(m) returns 0 (done), 1 (not yet) or -cudaError_t (the stream failed); describe_stream
// takes that negative value.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "tpipe/cuda/after.hpp"
#include "tpipe/cuda/error_macros.hpp"
#include "tpipe/cuda/peer_runtime.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/error_macros.hpp"

namespace tpipe::nccl {

//! Completion markers (record/query/release/describe_stream) are the peer copier's.
struct runtime_api : cuda::peer_runtime {
    using comm_t = ncclComm_t;

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

    template <class Check>
    auto after(stream_t s, const std::string& what, Check check)
    {
        return cuda::after(s, what, std::move(check));
    }

    void* device_alloc(std::size_t n)
    {
        void* p = nullptr;
        TPIPE_CUDA_TRY(cudaMalloc(&p, n == 0 ? 1 : n));
        return p;
    }
    void device_free(void* p) noexcept { (void)TPIPE_CUDA_LOG(cudaFree(p)); }
    void* host_alloc(std::size_t n)
    {
        void* p = nullptr;
        TPIPE_CUDA_TRY(cudaMallocHost(&p, n == 0 ? 1 : n));
        return p;
    }
    void host_free(void* p) noexcept { (void)TPIPE_CUDA_LOG(cudaFreeHost(p)); }
    int copy_async(void* dst, const void* src, std::size_t n, stream_t s) noexcept
    {
        const cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s);
        if (e != cudaSuccess) (void)cudaGetLastError();
        return e;
    }
    stream_t stream_create()
    {
        cudaStream_t s = nullptr;
        TPIPE_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        return s;
    }
    void stream_destroy(stream_t s) noexcept { (void)TPIPE_CUDA_LOG(cudaStreamDestroy(s)); }
};
static_assert(api<runtime_api>);

} // namespace tpipe::nccl
