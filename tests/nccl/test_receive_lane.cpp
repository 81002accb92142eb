#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <span>
#include <thread>
#include <vector>

#include "fake_nccl.hpp"
#include "members.hpp"
#include "tpipe/nccl/detail/receive_lane.hpp"

using tpipe::nccl::detail::envelope;
using tpipe::nccl::detail::envelope_bytes;

namespace {

//! Receives into per-tag byte vectors sized from the envelope's header (one uint64: the size).
struct sink final : tpipe::nccl::detail::lane_sink {
    std::map<int, std::vector<std::byte>> bodies;
    std::vector<std::atomic<int>> state = std::vector<std::atomic<int>>(16);
    std::vector<int> order;
    std::span<std::byte> announce(const envelope& e) override
    {
        std::uint64_t n = 0;
        std::memcpy(&n, e.header, sizeof n);
        auto& b = bodies[e.tag];
        b.assign(static_cast<std::size_t>(n), std::byte{0});
        return b;
    }
    void arrived(int tag) noexcept override
    {
        order.push_back(tag);
        state[static_cast<std::size_t>(tag)].store(1);
    }
};

//! The sender's side, by hand: an envelope (from a device copy) and the body in one group.
void send_message(tpipe::nccl::fake::api& a, tpipe::nccl::fake::comm_obj* c, tpipe::nccl::fake::stream_obj* s, int key, int tag,
                  const std::vector<std::byte>& body, std::vector<envelope>& staged)
{
    envelope e;
    e.key = key;
    e.tag = tag;
    const std::uint64_t n = body.size();
    e.header_bytes = sizeof n;
    e.body_bytes = n;
    std::memcpy(e.header, &n, sizeof n);
    staged.push_back(e);
    REQUIRE(a.group_start() == 0);
    REQUIRE(a.send(&staged.back(), envelope_bytes, 1, c, s) == 0);
    if (!body.empty()) REQUIRE(a.send(body.data(), body.size(), 1, c, s) == 0);
    REQUIRE(a.group_end() == 0);
}

//! Drives the lane until `tag` arrived (the driver double's device thread runs the kernels), for
//! at most 10 s.
template <class Lane>
void progress_until(Lane& lane, sink& k, int tag)
{
    std::atomic<int>& state = k.state[static_cast<std::size_t>(tag)];
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (state.load() != 1 && std::chrono::steady_clock::now() < deadline) {
        lane.progress(true);  // a receiver waits for a message that has not arrived
        std::this_thread::yield();
    }
}

} // namespace

TEST_CASE("receive lane: posts envelope, body, envelope... in the sender's order, and never a receive nobody sends",
          "[nccl][order]")
{
    tpipe::nccl::fake::world w;
    tpipe::nccl::fake::api a{&w};
    auto comms = w.init_all(2);
    auto* s0 = a.stream_create();
    auto* s1 = a.stream_create();
    tpipe::nccl::detail::receive_lane<tpipe::nccl::fake::api> lane(a, comms[1], s1, 0, 1);
    sink k;
    lane.attach(4, &k);
    std::vector<envelope> staged;
    staged.reserve(16);
    std::vector<std::vector<std::byte>> bodies;
    for (int t = 0; t < 8; ++t) bodies.emplace_back(static_cast<std::size_t>((t * 5) % 7), std::byte(t));  // sizes 0..6
    const std::vector<int> sent = {3, 0, 7, 1, 6, 2, 5, 4};
    for (int t : sent) send_message(a, comms[0], s0, 4, t, bodies[t], staged);

    // Nobody waits: nothing is posted.
    lane.progress(false);
    CHECK(!lane.busy());
    CHECK(comms[1]->recvs_from[0] == 0);

    // Waiting for tag 6 takes every message before it, in the sender's order, and stops there.
    progress_until(lane, k, 6);
    REQUIRE(k.state[6].load() == 1);
    CHECK(k.order == std::vector<int>{3, 0, 7, 1, 6});
    lane.progress(false);
    CHECK(!lane.busy());
    std::size_t receives = 0;
    for (int t : {3, 0, 7, 1, 6}) receives += 1 + (bodies[t].empty() ? 0 : 1);
    CHECK(comms[1]->recvs_from[0] == receives);  // no envelope posted ahead of a waiter

    progress_until(lane, k, 4);
    CHECK(k.order == sent);
    for (int t = 0; t < 8; ++t) CHECK(k.bodies[t] == bodies[t]);
}
