#pragma once
// The control plane of a tpipe::nccl::basic_transport whose "processes" are threads of one test
// (CPU tests with the fake NCCL, GPU tests with one thread per GPU): what tpipe::mpi::transport
// provides over MPI, over a shared notice board.
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/exec/layout.hpp"

namespace tpipe::nccl::fake {

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
    control(tpipe::layout w, int me, notice_board& b, int replica = 0) : w_(std::move(w)), me_(me), replica_(replica), b_(&b) {}
    bool runs(int rank) const { return w_.process_of(replica_, rank) == me_; }
    std::string where(int rank) const
    {
        const int p = w_.process_of(replica_, rank);
        return p == me_ ? std::string() : "on process " + std::to_string(p);
    }
    int process() const noexcept { return me_; }
    int replica() const noexcept { return replica_; }
    int tensor_rank() const noexcept { return 0; }
    const tpipe::layout& layout() const noexcept { return w_; }
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
    tpipe::layout w_;
    int me_, replica_;
    notice_board* b_;
};

//! A set-up bound (tpipe::nccl::bounds_setup) as tpipe::mpi::setup_bound is under the MPI
//! environment's bound: each blocking set-up call runs on a thread of its own; it records what
//! each call was.
struct thread_bound {
    template <class Call>
    auto bounded_setup(const char* what, Call call)
    {
        {
            std::lock_guard<std::mutex> g(m);
            calls.emplace_back(what);
        }
        std::invoke_result_t<Call&> out;
        std::thread([&] { out = call(); }).join();
        return out;
    }
    std::mutex m;
    std::vector<std::string> calls;
};

//! A control plane that bounds set-up, as tpipe::mpi::transport does.
struct bounding_control : control, thread_bound {
    using control::control;
};

} // namespace tpipe::nccl::fake
