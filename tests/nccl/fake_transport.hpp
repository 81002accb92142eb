#pragma once
// Test helpers for the NCCL transport on the CPU: "processes" are threads of this test, the
// control plane is a shared notice board, "device" payloads are std::vector<double> in host
// memory allocated from a counting pool.
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "fake_nccl.hpp"
#include "tpipe/exec/world.hpp"
#include "tpipe/nccl/basic_transport.hpp"
#include "tpipe/cuda/peer_payload.hpp"

namespace tpipe::nccl::fake {

//! Counts the payloads receivers made.
struct host_pool {
    std::atomic<int> made{0};
};

//! Failure notices between the threads that play processes.
struct notice_board {
    std::mutex m;
    std::vector<std::deque<std::string>> inbox;
    std::vector<std::string> agreed;
    explicit notice_board(int processes) : inbox(static_cast<std::size_t>(processes)), agreed(static_cast<std::size_t>(processes)) {}
};

//! The control plane of process `me` (what tpipe::mpi::transport provides over MPI).
class control {
public:
    control(tpipe::world w, int me, notice_board& b, int replica = 0) : w_(std::move(w)), me_(me), replica_(replica), b_(&b) {}
    bool runs(int rank) const { return w_.process_of(replica_, rank) == me_; }
    std::string where(int rank) const
    {
        const int p = w_.process_of(replica_, rank);
        return p == me_ ? std::string() : "on process " + std::to_string(p);
    }
    int process() const noexcept { return me_; }
    int replica() const noexcept { return replica_; }
    const tpipe::world& layout() const noexcept { return w_; }
    void agree(const std::string& text)
    {
        std::lock_guard<std::mutex> g(b_->m);
        b_->agreed[static_cast<std::size_t>(me_)] = text;
    }
    void fail(const std::string& message)
    {
        std::lock_guard<std::mutex> g(b_->m);
        for (std::size_t p = 0; p < b_->inbox.size(); ++p)
            if (static_cast<int>(p) != me_) b_->inbox[p].push_back("process " + std::to_string(me_) + ": " + message);
    }
    std::optional<std::string> failure()
    {
        std::lock_guard<std::mutex> g(b_->m);
        auto& q = b_->inbox[static_cast<std::size_t>(me_)];
        if (q.empty()) return std::nullopt;
        std::string s = "the iteration failed on " + q.front();
        q.pop_front();
        return s;
    }

private:
    tpipe::world w_;
    int me_, replica_;
    notice_board* b_;
};

using transport = basic_transport<api, control, host_pool>;

} // namespace tpipe::nccl::fake

template <>
struct tpipe::cuda::device_payload_traits<std::vector<double>> {
    struct header {
        std::uint64_t count;
    };
    static header header_of(const std::vector<double>& v) { return {v.size()}; }
    static std::vector<double> make(const header& h, tpipe::nccl::fake::host_pool& pool)
    {
        pool.made.fetch_add(1);
        return std::vector<double>(static_cast<std::size_t>(h.count));
    }
    static std::span<const std::byte> device_bytes(const std::vector<double>& v) { return std::as_bytes(std::span<const double>(v)); }
    static std::span<std::byte> device_bytes(std::vector<double>& v) { return std::as_writable_bytes(std::span<double>(v)); }
};
static_assert(tpipe::transport<tpipe::nccl::fake::transport>);
