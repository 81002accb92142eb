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
struct after_gives_int : fake_api {  // after must give an awaitable of the recorded work
    template <class Check>
    int after(stream_t, const std::string&, Check)
    {
        return 0;
    }
};
struct throwing_abort : fake_api {  // abort runs on error paths: it must be noexcept
    void abort(comm_t) {}
};
struct no_split : fake_api {  // split hidden by a member of another kind
    static constexpr int split = 0;
};
struct allocates_ints : fake_api {  // device_alloc gives untyped memory
    int* device_alloc(std::size_t) { return nullptr; }
};
static_assert(tpipe::nccl::api<fake_api>);
static_assert(!tpipe::nccl::api<after_gives_int>);
static_assert(!tpipe::nccl::api<throwing_abort>);
static_assert(!tpipe::nccl::api<no_split>);
static_assert(!tpipe::nccl::api<allocates_ints>);

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
