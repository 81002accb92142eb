// The memory pool's bookkeeping against the fake driver: size classes, stream-ordered reuse
// (at once on the same stream, on another stream only after the free's event completed),
// a repeated iteration allocating nothing after the first, refusals and allocation failures.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fake_driver.hpp"
#include "tpipe/cuda/basic_memory_pool.hpp"
#include "tpipe/cuda/event_pool.hpp"

namespace {

using pool_t = tpipe::cuda::basic_memory_pool<fake::driver>;
using tpipe::cuda::memory_kind;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct fixture {
    fake::driver d{2};
    tpipe::cuda::basic_event_pool<fake::driver> events{d};
    pool_t pool{d, events};
    fake::stream_state* s0 = nullptr;
    fake::stream_state* s1 = nullptr;
    fixture()
    {
        d.stream_create(&s0);
        d.stream_create(&s1);
    }
};

} // namespace

TEST_CASE("sizes round up to 512 B classes up to 1 MiB and 2 MiB classes beyond", "[cuda][cpu][memory]")
{
    CHECK(pool_t::rounded(1) == 512);
    CHECK(pool_t::rounded(512) == 512);
    CHECK(pool_t::rounded(513) == 1024);
    CHECK(pool_t::rounded(1 << 20) == 1 << 20);
    CHECK(pool_t::rounded((1 << 20) + 1) == 2 << 20);
    CHECK(pool_t::rounded((5 << 20) + 3) == 6 << 20);
}

TEST_CASE("a block freed by a stream is reused at once by that stream", "[cuda][cpu][memory]")
{
    fixture f;
    void* first = nullptr;
    {
        auto b = f.pool.allocate(1000, 0, f.s0);
        CHECK(b.bytes() == 1000);
        CHECK(b.capacity() == 1024);
        CHECK(b.device() == 0);
        CHECK(b.stream() == f.s0);
        CHECK(b.kind() == memory_kind::device);
        first = b.data();
        f.d.launch(f.s0);  // work using it, not completed when it is freed
    }
    auto again = f.pool.allocate(900, 0, f.s0);  // same class, same stream: stream order suffices
    CHECK(again.data() == first);
    CHECK(f.d.mallocs() == 1);
}

TEST_CASE("another stream reuses a freed block only after the work before the free completed", "[cuda][cpu][memory]")
{
    fixture f;
    void* first = nullptr;
    {
        auto b = f.pool.allocate(4096, 0, f.s0);
        first = b.data();
        f.d.launch(f.s0);
    }
    auto other = f.pool.allocate(4096, 0, f.s1);  // s0's work may still use the block
    CHECK(other.data() != first);
    CHECK(f.d.mallocs() == 2);
    f.d.complete(f.s0);  // the kernel, not yet the free's event
    auto still = f.pool.allocate(4096, 0, f.s1);
    CHECK(still.data() != first);
    f.d.complete_all();  // the free's event
    auto later = f.pool.allocate(4096, 0, f.s1);
    CHECK(later.data() == first);
    CHECK(f.d.mallocs() == 3);
}

TEST_CASE("use_on makes reuse wait for the other stream's work too", "[cuda][cpu][memory]")
{
    fixture f;
    void* first = nullptr;
    {
        auto b = f.pool.allocate(4096, 0, f.s0);
        first = b.data();
        b.use_on(f.s1);    // a copy on the transfer stream reads it
        f.d.launch(f.s1);
    }
    f.d.complete(f.s0, 10);  // the owner's stream is done, the transfer stream is not
    {
        auto b = f.pool.allocate(4096, 0, f.s0);
        CHECK(b.data() != first);  // even its own stream must wait for the transfer
    }
    f.d.complete_all();
    auto b = f.pool.allocate(4096, 0, f.s0);
    CHECK(f.d.mallocs() == 2);
    CHECK(b.data() != nullptr);
}

TEST_CASE("a repeated iteration pattern allocates nothing from the driver after the first", "[cuda][cpu][memory]")
{
    fixture f;
    f.d.start_device();  // the device completes work while the host allocates
    auto iteration = [&] {
        std::vector<tpipe::cuda::basic_device_buffer<fake::driver>> live;
        for (int layer = 0; layer < 6; ++layer) {
            live.push_back(f.pool.allocate(static_cast<std::size_t>(1000 + 300 * layer), layer % 2, layer % 2 ? f.s1 : f.s0));
            live.push_back(f.pool.allocate(std::size_t{3} << 20, 0, f.s0));
            live.push_back(f.pool.allocate(256, 1, f.s1, memory_kind::pinned_host));
            f.d.launch(layer % 2 ? f.s1 : f.s0);
            if (layer % 3 == 2) live.erase(live.begin());  // activations freed mid-iteration
        }
    };
    iteration();
    const auto after_first = f.d.mallocs();
    CHECK(after_first > 0);
    for (int i = 0; i < 20; ++i) iteration();
    CHECK(f.d.mallocs() == after_first);
    const auto st = f.pool.stats();
    CHECK(st.driver_allocations == after_first);
    CHECK(st.blocks_in_use == 0);
    CHECK(st.bytes_in_use == 0);
    CHECK(st.blocks_cached == after_first);
    f.d.stop_device();
    f.d.complete_all();
    f.pool.release_cached();
    CHECK(f.d.frees() == after_first);
    CHECK(f.d.bytes_live() == 0);
}

TEST_CASE("the pool refuses 0 and absurd sizes and names the pool's state when the driver fails", "[cuda][cpu][memory]")
{
    fixture f;
    CHECK_THROWS_WITH(f.pool.allocate(0, 0, f.s0), Catch::Contains("at least 1 byte"));
    CHECK_THROWS_AS(f.pool.allocate(0, 0, f.s0), tpipe::invalid_argument);
    CHECK_THROWS_WITH(f.pool.allocate(static_cast<std::size_t>(-8), 0, f.s0), Catch::Contains("max_bytes"));
    CHECK_THROWS_AS(f.pool.allocate(16, -1, f.s0), tpipe::invalid_argument);
    f.d.set_memory_limit(8 << 20);
    auto a = f.pool.allocate(4 << 20, 0, f.s0);
    {
        auto idle = f.pool.allocate(2 << 20, 0, f.s0);
    }
    f.d.complete_all();  // the idle block's free event completes: it can be returned on pressure
    auto b = f.pool.allocate(3 << 20, 0, f.s0);  // fits only once the idle 2 MiB block is freed
    CHECK(f.d.frees() == 1);
    try {
        auto c = f.pool.allocate(6 << 20, 0, f.s0);
        FAIL("no error");
    } catch (const tpipe::cuda::cuda_error& e) {
        CAPTURE(e.what());
        CHECK(e.code() == fake::code::memory_allocation);
        CHECK(contains(e.what(), "cudaMalloc of 6291456 bytes"));
        CHECK(contains(e.what(), "GPU 0"));
        CHECK(contains(e.what(), "8388608 bytes in use in 2 blocks"));
        CHECK(contains(e.what(), "cudaErrorMemoryAllocation"));
    }
    int err = f.d.last_error();
    CHECK(err == 0);  // the failure was cleared
}

TEST_CASE("a moved buffer owns the block once; reset returns it", "[cuda][cpu][memory]")
{
    fixture f;
    auto a = f.pool.allocate(100, 0, f.s0);
    void* p = a.data();
    auto b = std::move(a);
    CHECK(!a);
    CHECK(b.data() == p);
    CHECK(f.pool.stats().blocks_in_use == 1);
    b.reset();
    CHECK(!b);
    CHECK(f.pool.stats().blocks_in_use == 0);
    CHECK(f.pool.stats().blocks_cached == 1);
    CHECK_THROWS_AS(b.use_on(f.s1), tpipe::error);
}
