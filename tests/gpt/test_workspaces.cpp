// The steady state allocates nothing: after a few iterations of the same shape, a further
// iteration through a chain of parts (token-sliced, one part on a pool of 2 threads) and an
// AdamW step make no heap allocation. Counted by replacing the global operator new in this
// test executable.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <new>

#include <tpipe/slice/slicers.hpp>

#include "common.hpp"

namespace {
std::atomic<long> allocations{0};
}

// Sanitizers replace operator new themselves (and report a replacement's free of their blocks as
// a mismatch): the count is only taken in regular builds.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define GPT_COUNTS_ALLOCATIONS 0
#else
#define GPT_COUNTS_ALLOCATIONS 1
void* operator new(std::size_t n)
{
    allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#endif

TEST_CASE("a steady-state iteration allocates nothing", "[gpt][workspaces]")
{
    if (!GPT_COUNTS_ALLOCATIONS) {
        WARN("not checked under sanitizers: they own operator new");
        return;
    }
    auto cfg = gpt_test::tiny_config();
    cfg.seq_len = 80;  // two attention query blocks
    gpt::parameters<float> params(cfg);
    params.init(3);
    gpt::adamw<float> opt(params, {});
    gpt::part<float> first(params, 0, 1, true, false, 2), last(params, 1, 2, false, true, 1);
    const std::vector<gpt::part<float>*> chain{&first, &last};
    const auto units = tpipe::grid_slicer{2, {30, 10, 40}}.scheme({3, 80});
    const auto b = gpt_test::random_batch(cfg, 3, 80, 9);
    const long at_start = allocations.load();
    gpt::run_in_order(chain, units, b);
    REQUIRE(allocations.load() > at_start);  // the first iteration builds the workspaces: the count works
    for (int warm = 0; warm < 2; ++warm) {
        gpt::run_in_order(chain, units, b);
        opt.step(params);
    }
    const long before = allocations.load();
    const double loss = gpt::run_in_order(chain, units, b);
    opt.step(params);
    const long during = allocations.load() - before;
    CHECK(std::isfinite(loss));
    CHECK(during == 0);
}
