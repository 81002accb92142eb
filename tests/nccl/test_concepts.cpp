// The NCCL tree's concepts both ways: the test doubles (and, over MPI, tpipe::mpi::transport:
// tests/mpi) satisfy them, near misses (one member of the wrong type) do not.
#include <optional>
#include <string>

#include "fake_nccl.hpp"
#include "thread_control.hpp"
#include "tpipe/nccl/api.hpp"
#include "tpipe/nccl/basic_transport.hpp"

namespace {

using fake_api = tpipe::nccl::fake::api;

// ---- api ----------------------------------------------------------------------------------------
struct own_streams {  // NCCL calls right, but streams of its own instead of the driver seam's
    using comm_t = fake_api::comm_t;
    using stream_t = fake_api::stream_t;
    using driver_type = fake_api::driver_type;
    fake_api nccl;
    int get_unique_id(tpipe::nccl::unique_id& id) { return nccl.get_unique_id(id); }
    int init_rank(comm_t& out, int n, const tpipe::nccl::unique_id& id, int r) { return nccl.init_rank(out, n, id, r); }
    int split(comm_t c, int color, int key, comm_t& out) { return nccl.split(c, color, key, out); }
    int rank_of(comm_t c) { return nccl.rank_of(c); }
    int size_of(comm_t c) { return nccl.size_of(c); }
    int group_start() { return nccl.group_start(); }
    int group_end() { return nccl.group_end(); }
    int send(const void* in, std::size_t n, int p, comm_t c, stream_t s) { return nccl.send(in, n, p, c, s); }
    int recv(void* o, std::size_t n, int p, comm_t c, stream_t s) { return nccl.recv(o, n, p, c, s); }
    int all_reduce(const void* in, void* o, std::size_t n, tpipe::nccl::dtype t, tpipe::nccl::redop op, comm_t c, stream_t s)
    {
        return nccl.all_reduce(in, o, n, t, op, c, s);
    }
    int broadcast(const void* in, void* o, std::size_t n, int root, comm_t c, stream_t s) { return nccl.broadcast(in, o, n, root, c, s); }
    int async_error(comm_t c) { return nccl.async_error(c); }
    void abort(comm_t c) noexcept { nccl.abort(c); }
    void destroy(comm_t c) noexcept { nccl.destroy(c); }
    std::string describe(int rc, comm_t c) { return nccl.describe(rc, c); }
};
struct throwing_abort : fake_api {  // abort runs on error paths: it must be noexcept
    void abort(comm_t) {}
};
struct no_split : fake_api {  // split hidden by a member of another kind
    static constexpr int split = 0;
};
struct sends_typed : fake_api {  // point-to-point moves bytes: a send of doubles is not NCCL's call
    int send(const double*, std::size_t, int, comm_t, stream_t) { return 0; }
};
static_assert(tpipe::nccl::api<fake_api>);
static_assert(!tpipe::nccl::api<own_streams>);
static_assert(!tpipe::nccl::api<throwing_abort>);
static_assert(!tpipe::nccl::api<no_split>);
static_assert(!tpipe::nccl::api<sends_typed>);
// own_streams lacks nothing but its streams' seam: on device_calls it is an api.
struct own_streams_fixed : tpipe::nccl::device_calls<fake_api::driver_type>, own_streams {
    using own_streams::comm_t;
    using own_streams::driver_type;
    using own_streams::stream_t;
};
static_assert(tpipe::nccl::api<own_streams_fixed>);

// ---- transport_control --------------------------------------------------------------------------
using control = tpipe::nccl::fake::control;
struct no_layout : control {  // basic_transport needs the world's layout (processes, peers)
    using control::control;
    static constexpr int layout = 0;
};
struct failure_as_text : control {  // failure() says whether one arrived: an optional
    using control::control;
    std::string failure() { return {}; }
};
struct const_agree_only : control {  // agree is collective: called on a mutable control
    using control::control;
    void agree(const std::string&) = delete;
};
static_assert(tpipe::nccl::transport_control<control>);
static_assert(!tpipe::nccl::transport_control<no_layout>);
static_assert(!tpipe::nccl::transport_control<failure_as_text>);
static_assert(!tpipe::nccl::transport_control<const_agree_only>);

} // namespace
