// The in-process communicator allocates nothing per operation in the steady state (meeting
// slots and message buffers are reused): counted with a replaced operator new, per thread.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/async/sync_wait.hpp"
#include "tpipe/async/task.hpp"

namespace {
thread_local long allocations = 0;
}

// Every non-aligned form, so that each allocation is freed by its own family (sanitizers check).
namespace {
void* counted_alloc(std::size_t n) noexcept
{
    ++allocations;
    return std::malloc(n ? n : 1);
}
void* counted_alloc_or_throw(std::size_t n)
{
    if (void* p = counted_alloc(n)) return p;
    throw std::bad_alloc();
}
} // namespace

// GCC 12 at -O1 (the sanitizer builds) inlines these into std::allocator and then takes the
// free() of a pointer that operator new returned for a mismatch: a replacement pair of malloc
// and free is what the standard allows, so that warning is off for them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) { return counted_alloc_or_throw(n); }
void* operator new[](std::size_t n) { return counted_alloc_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return counted_alloc(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

TEST_CASE("steady-state collectives and messages allocate nothing", "[comm][thread]")
{
    const long a0 = allocations;
    void* probe = ::operator new(16);  // the counter counts (a direct call is never elided)
    const long a1 = allocations;
    ::operator delete(probe);
    REQUIRE(a1 == a0 + 1);

    constexpr int d = 3;
    tpipe::thread_group g(d);
    std::vector<long> counted(d, -1);
    std::vector<std::thread> threads;
    for (int i = 0; i < d; ++i)
        threads.emplace_back([&, i] {
            tpipe::sync_wait([](tpipe::thread_communicator c, long& out) -> tpipe::task<void> {
                std::vector<float> grad(4096, 1.0f);
                std::vector<std::byte> msg(256);
                const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
                // Messages come from a pool that grows to the most ever in flight. This test's
                // peak is one per member (the collectives keep a member from sending again before
                // its message was taken): reach it first, every message posted before any
                // receive, so that the steady state below cannot meet a new peak by timing.
                co_await c.barrier();
                co_await c.send(next, 1, msg);
                co_await c.barrier();
                co_await c.recv(prev, 1, msg);
                long before = 0;
                for (int iter = 0; iter < 50; ++iter) {
                    if (iter == 10) before = allocations;  // after warm-up: slots and buffers exist
                    co_await c.all_reduce_sum(std::span<float>(grad));
                    co_await c.send(next, 1, msg);
                    co_await c.recv(prev, 1, msg);
                    co_await c.broadcast(msg, 0);
                    co_await c.barrier();
                }
                out = allocations - before;
            }(g.member(i), counted[static_cast<std::size_t>(i)]));
        });
    for (auto& t : threads) t.join();
    REQUIRE(counted == std::vector<long>(d, 0));
}
