// The peer copier over the driver seam (tpipe::cuda::driver_copier), on the engine's test double:
// a copy lands when its stream reaches it, its marker is a pooled event, and a failed copy is
// reported as a failure (negated driver code) that the driver names.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "fake_driver.hpp"
#include "tpipe/cuda/driver_copier.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/cuda/peer_link.hpp"

using copier = tpipe::cuda::driver_copier<fake::driver>;
static_assert(tpipe::cuda::peer_copier<copier>);

TEST_CASE("driver_copier: a peer copy lands when its stream reaches it, and its marker says when", "[cuda][peer]")
{
    fake::driver d(2);
    tpipe::cuda::basic_event_pool<fake::driver> events(d);
    copier c(d, events);
    fake::driver::stream_type s{};  // GPU 1's: the receiver copies on its own transfer stream
    d.set_device(1);
    d.stream_create(&s);
    d.set_device(0);
    const std::vector<int> src{1, 2, 3};
    std::vector<int> dst(3, 0);
    const std::size_t bytes = sizeof(int) * src.size();

    REQUIRE(c.copy_peer(dst.data(), 1, src.data(), 0, bytes, s) == 0);
    const copier::marker_t m = c.record(s);
    CHECK(m.gpu == 1);
    CHECK(c.query(m) == 1);  // not yet, and nothing landed
    CHECK(dst == std::vector<int>(3, 0));
    CHECK(d.complete(s, 2) == 2);  // the copy, then the marker
    CHECK(c.query(m) == 0);
    CHECK(dst == src);
    c.release(m);

    const copier::marker_t again = c.record(s);  // the marker's event comes back from the pool
    CHECK(d.events_created() == 1);
    d.complete(s);
    CHECK(c.query(again) == 0);
    c.release(again);
    CHECK(d.copies() == 1);
}

TEST_CASE("driver_copier: a copy that fails on the device fails its marker, named by the driver", "[cuda][peer]")
{
    fake::driver d(2);
    tpipe::cuda::basic_event_pool<fake::driver> events(d);
    copier c(d, events);
    fake::driver::stream_type s{};
    d.stream_create(&s);
    const std::vector<int> src{7};
    std::vector<int> dst(1, 0);
    d.fail_copies(1);
    REQUIRE(c.copy_peer(dst.data(), 0, src.data(), 1, sizeof(int), s) == 0);  // enqueued: it fails when it runs
    const copier::marker_t m = c.record(s);
    d.complete(s, 2);
    const int rc = c.query(m);
    CHECK(rc < 0);  // a failure, never mistaken for "not yet" (1) whatever the driver's code
    CHECK(c.describe_stream(rc) == "cudaErrorIllegalAddress: an illegal memory access was encountered");
    CHECK(dst == std::vector<int>(1, 0));
    c.release(m);
}
