// tpipe::payload_pool and std::vector's payload_traits: bodies are recycled by exact size,
// within the pool's limits, and make(h) receives into a recycled body.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "tpipe/transport/payload_pool.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/transport/recyclable_payload.hpp"

using bytes = std::vector<std::byte>;

TEST_CASE("payload_pool hands back an object of exactly the body size, within its limits", "[exec][pool]")
{
    tpipe::payload_pool<bytes> pool({.min_bytes = 100, .max_bytes = 1000, .per_size = 2});
    REQUIRE_FALSE(pool.take(200).has_value());
    bytes a(200), b(200), c(200), small(50), big(900);
    const std::byte* pa = a.data();
    pool.give(std::move(a), 200);
    pool.give(std::move(b), 200);
    pool.give(std::move(c), 200);      // a third of one size: dropped (per_size)
    pool.give(std::move(small), 50);   // below min_bytes: dropped
    REQUIRE(pool.cached_bytes() == 400);
    pool.give(std::move(big), 900);    // over max_bytes: dropped
    REQUIRE(pool.cached_bytes() == 400);
    REQUIRE_FALSE(pool.take(300).has_value());  // no other size serves
    auto got = pool.take(200);
    REQUIRE(got.has_value());
    REQUIRE(got->size() == 200);
    REQUIRE(got->data() == pa);  // the first of that size
    REQUIRE(pool.hits() >= 1);
    REQUIRE(pool.misses() == 2);
    pool.clear();
    REQUIRE(pool.cached_bytes() == 0);
}

TEST_CASE("std::vector payloads: make receives into a recycled body; recycle gives it back", "[exec][pool]")
{
    STATIC_REQUIRE(tpipe::recyclable_payload<std::vector<float>>);
    using traits = tpipe::payload_traits<std::vector<float>>;
    auto& pool = tpipe::payload_pool<std::vector<float>>::global();
    pool.clear();
    std::vector<float> sent(1 << 16, 3.0f);  // 256 KiB: above the default min_bytes
    const float* storage = sent.data();
    tpipe::recycle(std::move(sent));
    auto received = traits::make({1 << 16});
    REQUIRE(received.size() == (1u << 16));
    REQUIRE(received.data() == storage);  // the recycled body, not a fresh zero-filled one
    auto fresh = traits::make({1 << 16});  // nothing cached: a new, value-initialised vector
    REQUIRE(fresh.data() != storage);
    REQUIRE(fresh[123] == 0.0f);
    auto small = traits::make({3});  // small bodies never touch the pool
    REQUIRE(small == std::vector<float>(3, 0.0f));
    pool.clear();
}
