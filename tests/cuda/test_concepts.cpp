// The CUDA tree's concepts both ways: the test double and the shipped models satisfy them, near
// misses (one member of the wrong type) do not.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "fake_driver.hpp"
#include "tpipe/cuda/basic_memory_pool.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/cuda/peer_link.hpp"
#include "tpipe/transport/device_payload_traits.hpp"

namespace {

// ---- driver -------------------------------------------------------------------------------------
struct query_says_bool : fake::driver {  // event_query must return the int status
    bool event_query(event_type) { return true; }
};
struct no_last_error : fake::driver {  // last_error hidden by a member of another kind
    static constexpr int last_error = 0;
};
struct movable_only_stream : fake::driver {  // a stream handle must be copyable
    struct stream_type {
        stream_type() = default;
        stream_type(stream_type&&) = default;
    };
};
static_assert(tpipe::cuda::driver<fake::driver>);
static_assert(!tpipe::cuda::driver<query_says_bool>);
static_assert(!tpipe::cuda::driver<no_last_error>);
static_assert(!tpipe::cuda::driver<movable_only_stream>);

// ---- peer_copier ----------------------------------------------------------------------------------
struct copier {
    using stream_t = int;
    struct marker_t {
        int at = 0;
    };
    int copy_peer(void*, int, const void*, int, std::size_t, stream_t) { return 0; }
    marker_t record(stream_t) { return {}; }
    int query(marker_t) { return 0; }
    void release(marker_t) noexcept {}
    std::string describe_stream(int) const { return {}; }
};
struct throwing_release : copier {  // release runs in destructors: it must be noexcept
    void release(marker_t) {}
};
struct record_gives_int : copier {  // record must give the copier's own marker
    int record(stream_t) { return 0; }
};
struct uncopyable_copier : copier {  // a channel keeps its own copy
    uncopyable_copier() = default;
    uncopyable_copier(const uncopyable_copier&) = delete;
};
static_assert(tpipe::cuda::peer_copier<copier>);
static_assert(!tpipe::cuda::peer_copier<throwing_release>);
static_assert(!tpipe::cuda::peer_copier<record_gives_int>);
static_assert(!tpipe::cuda::peer_copier<uncopyable_copier>);

// ---- payload_pool and device_payload ----------------------------------------------------------------
struct host_pool {
    int made = 0;
};
static_assert(tpipe::cuda::payload_pool<host_pool>);
static_assert(tpipe::cuda::payload_pool<tpipe::cuda::basic_memory_pool<fake::driver>>);
static_assert(!tpipe::cuda::payload_pool<const host_pool>);  // make allocates from it
static_assert(!tpipe::cuda::payload_pool<host_pool&>);
static_assert(!tpipe::cuda::payload_pool<void>);

struct dev_floats {
    std::vector<float> v;
};
struct wide_header {  // its header does not fit NCCL's envelope
    std::vector<float> v;
};
struct pool_less {  // make does not take the pool
    std::vector<float> v;
};
} // namespace

template <>
struct tpipe::device_payload_traits<dev_floats> {
    struct header {
        std::uint64_t count;
    };
    using pool = host_pool;
    static header header_of(const dev_floats& d) { return {d.v.size()}; }
    static dev_floats make(const header& h, host_pool& p)
    {
        ++p.made;
        return {std::vector<float>(static_cast<std::size_t>(h.count))};
    }
    static std::span<const std::byte> device_bytes(const dev_floats& d) { return std::as_bytes(std::span<const float>(d.v)); }
    static std::span<std::byte> device_bytes(dev_floats& d) { return std::as_writable_bytes(std::span<float>(d.v)); }
};
template <>
struct tpipe::device_payload_traits<wide_header> {
    struct header {
        std::uint64_t shape[6];
    };
    static header header_of(const wide_header&) { return {}; }
    static wide_header make(const header&, host_pool&) { return {}; }
    static std::span<const std::byte> device_bytes(const wide_header& d) { return std::as_bytes(std::span<const float>(d.v)); }
    static std::span<std::byte> device_bytes(wide_header& d) { return std::as_writable_bytes(std::span<float>(d.v)); }
};
template <>
struct tpipe::device_payload_traits<pool_less> {
    struct header {
        std::uint64_t count;
    };
    static header header_of(const pool_less&) { return {}; }
    static pool_less make(const header&) { return {}; }
    static std::span<const std::byte> device_bytes(const pool_less& d) { return std::as_bytes(std::span<const float>(d.v)); }
    static std::span<std::byte> device_bytes(pool_less& d) { return std::as_writable_bytes(std::span<float>(d.v)); }
};

static_assert(tpipe::device_payload<dev_floats, host_pool>);
static_assert(!tpipe::device_payload<dev_floats, int>);  // make takes a host_pool
static_assert(!tpipe::device_payload<wide_header, host_pool>);
static_assert(!tpipe::device_payload<pool_less, host_pool>);
static_assert(!tpipe::device_payload<std::vector<float>, host_pool>);  // no device form given
static_assert(!tpipe::byte_payload<dev_floats>);  // and a device form is no host byte form
static_assert(tpipe::pooled_device_payload<dev_floats>);
static_assert(!tpipe::pooled_device_payload<wide_header>);  // its traits name no pool
