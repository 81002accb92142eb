#pragma once
// tpipe::cuda::basic_peer_channel<T, Copier, Pool>: a tpipe::channel between two stages of one
// process whose ranks run on GPUs, for payloads with a device form (tpipe/transport/device_payload_traits.hpp).
// Made by tpipe::cuda::basic_peer_transport (tpipe/cuda/basic_peer_transport.hpp) for the boundaries
// whose two ranks run in this process.
//
// - Same GPU: the payload moves, no copy. This is safe because the runner sends a payload only
//   after the producing compute's awaitable completed, i.e. after the GPU finished the work that
//   wrote it (the CUDA engine's compute completes when its stream's work has), so the consumer's
//   kernels, on another stream of the same GPU, read finished memory.
// - Different GPUs: send() makes the receiving payload from the receiver's pool
//   (device_payload_traits<T>::make(header, pool), on the sending thread: the pool must allocate
//   on the receiving GPU and be thread-safe, as tpipe::cuda::memory_pool is), and enqueues
//   cudaMemcpyPeerAsync on the receiver's transfer stream; arrival(tag) completes once that copy
//   completed (an event polled from the receiving loop), so the receiver's compute stream sees
//   the bytes. The sender's payload is kept until then (drain() waits for it); the transfer
//   overlaps the compute of both GPUs.
// Errors: a failed copy or stream error throws tpipe::cuda::cuda_error from arrival or drain.
#include <atomic>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/cuda/payload_pool.hpp"
#include "tpipe/transport/device_payload_traits.hpp"
#include "tpipe/transport/channel.hpp"
#include "tpipe/async/operation_cancelled.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/async/polled_awaiter.hpp"
#include "tpipe/exec/stage.hpp"

namespace tpipe::cuda {

//! The calls a peer channel makes: an asynchronous copy between GPUs and completion markers
//! (0 done, 1 not yet, else an error describe_stream names). tpipe::cuda::driver_copier makes
//! one of any cuda::driver (tpipe/cuda/driver_copier.hpp); peer_runtime is it over the runtime.
template <class A>
concept peer_copier = std::copy_constructible<A> &&
                      requires(A& a, typename A::stream_t s, typename A::marker_t m, void* dst, const void* src, std::size_t n, int gpu) {
                          { a.copy_peer(dst, gpu, src, gpu, n, s) } -> std::same_as<int>;
                          { a.record(s) } -> std::same_as<typename A::marker_t>;
                          { a.query(m) } -> std::same_as<int>;
                          { a.release(m) } noexcept;
                          { a.describe_stream(0) } -> std::convertible_to<std::string>;
                      };

template <payload T, peer_copier Copier, payload_pool Pool>
class basic_peer_channel {
public:
    using value_type = T;
    using stream_t = typename Copier::stream_t;

    //! From a rank on `src_gpu` to one on `dst_gpu`, copying (if they differ) on `dst_stream`.
    basic_peer_channel(Copier c, int src_gpu, int dst_gpu, stream_t dst_stream, Pool& pool, int tags)
        : copier_(std::move(c)), src_gpu_(src_gpu), dst_gpu_(dst_gpu), stream_(dst_stream), pool_(pool)
    {
        reset(tags);
    }
    basic_peer_channel(const basic_peer_channel&) = delete;
    basic_peer_channel& operator=(const basic_peer_channel&) = delete;
    ~basic_peer_channel()
    {
        std::lock_guard<std::mutex> g(m_);
        for (auto& s : slots_)
            if (s.state.load(std::memory_order_relaxed) == copying) copier_.release(s.marker);
    }

    //! Whether payloads move (same GPU) rather than being copied.
    bool moves() const noexcept { return src_gpu_ == dst_gpu_; }

    void send(int tag, T&& v)
    {
        static_assert(device_payload<T, Pool>, "tpipe::cuda::peer_channel: this stage payload type has no device form; "
                                               "specialise tpipe::device_payload_traits<T> (tpipe/transport/device_payload_traits.hpp)");
        using traits = device_payload_traits<T>;
        std::lock_guard<std::mutex> g(m_);
        slot& s = at(tag);
        if (s.state.load(std::memory_order_relaxed) != empty)
            throw error("peer_channel: tag " + std::to_string(tag) + " was sent twice in one iteration");
        if (moves()) {
            s.value.emplace(std::move(v));
            s.state.store(full, std::memory_order_release);
            return;
        }
        s.source.emplace(std::move(v));
        s.value.emplace(traits::make(traits::header_of(*s.source), pool_));
        const std::span<const std::byte> from = traits::device_bytes(std::as_const(*s.source));
        const std::span<std::byte> to = traits::device_bytes(*s.value);
        if (from.size() != to.size())
            throw error("peer_channel: the payload of tag " + std::to_string(tag) + " has " + std::to_string(from.size()) +
                        " device bytes, but the one made from its header on GPU " + std::to_string(dst_gpu_) + " has " +
                        std::to_string(to.size()) + " (device_payload_traits::make must reproduce the size)");
        if (!from.empty()) {
            if (const int rc = copier_.copy_peer(to.data(), dst_gpu_, from.data(), src_gpu_, from.size(), stream_); rc != 0)
                throw cuda_error("peer_channel: cudaMemcpyPeerAsync (GPU " + std::to_string(src_gpu_) + " to GPU " +
                                     std::to_string(dst_gpu_) + ", tag " + std::to_string(tag) + ") failed: " + copier_.describe_stream(rc),
                                 rc, "cudaMemcpyPeerAsync");
        }
        s.marker = copier_.record(stream_);
        s.state.store(copying, std::memory_order_release);
        ++copies_;
    }

    void post(int tag) { (void)at(tag); }

    //! Completes once the payload of `tag` is on the receiving GPU.
    auto arrival(int tag)
    {
        (void)at(tag);
        return waiter(this, [tag](basic_peer_channel& c) { return c.settle(tag); });
    }
    bool ready(int tag) const noexcept
    {
        return tag >= 0 && tag < tags_ && slots_[static_cast<std::size_t>(tag)].state.load(std::memory_order_acquire) == full;
    }
    T take(int tag)
    {
        std::lock_guard<std::mutex> g(m_);
        slot& s = at(tag);
        return tpipe::detail::take_arrived(s.state, s.value, full, taken, "peer_channel", tag);
    }

    //! Completes once every copy of this iteration completed (the senders' payloads released).
    auto drain()
    {
        return waiter(this, [](basic_peer_channel& c) {
            for (int t = 0; t < c.tags_; ++t)
                if (!c.settle_copy(t)) return false;
            return true;
        });
    }

    //! Starts a new iteration with room for `tags` tags (no receive may be in progress), whose
    //! waits throw operation_cancelled once `stop` is stopped.
    void reset(int tags, std::stop_token stop = {})
    {
        if (tags < 0) throw invalid_argument("peer_channel: the number of tags must be >= 0");
        std::lock_guard<std::mutex> g(m_);
        for (auto& s : slots_)
            if (s.state.load(std::memory_order_relaxed) == copying) copier_.release(s.marker);  // an interrupted iteration
        if (tags != tags_) {
            slots_ = std::vector<slot>(static_cast<std::size_t>(tags));
            tags_ = tags;
        }
        for (auto& s : slots_) {
            s.state.store(empty, std::memory_order_relaxed);
            s.value.reset();
            s.source.reset();
        }
        stop_ = std::move(stop);
    }

    //! Copies issued so far (tests count them).
    std::size_t copies() const noexcept { return copies_; }

private:
    enum state_t : int { empty, copying, full, taken };

    struct slot {
        std::atomic<int> state{empty};
        std::optional<T> value;   //!< the receiver's payload
        std::optional<T> source;  //!< the sender's, kept until the copy completed
        typename Copier::marker_t marker{};
    };

    //! Marks a completed copy full (and drops the source); true once the slot is full or taken.
    bool settle(int tag)
    {
        const int st = slots_[static_cast<std::size_t>(tag)].state.load(std::memory_order_acquire);
        if (st == full || st == taken) return true;
        return st == copying && settle_copy(tag) && slots_[static_cast<std::size_t>(tag)].state.load(std::memory_order_acquire) == full;
    }
    //! True unless tag's copy is still running (throws if it failed).
    bool settle_copy(int tag)
    {
        slot& s = slots_[static_cast<std::size_t>(tag)];
        if (s.state.load(std::memory_order_acquire) != copying) return true;
        std::unique_lock<std::mutex> g(m_, std::try_to_lock);
        if (!g.owns_lock()) return false;
        if (s.state.load(std::memory_order_relaxed) != copying) return true;
        const int rc = copier_.query(s.marker);
        if (rc == 1) return false;
        copier_.release(s.marker);
        s.source.reset();
        if (rc != 0) {
            s.state.store(empty, std::memory_order_release);
            throw cuda_error("peer_channel: the copy of tag " + std::to_string(tag) + " from GPU " + std::to_string(src_gpu_) + " to GPU " +
                                 std::to_string(dst_gpu_) + " failed: " + copier_.describe_stream(rc),
                             rc, "cudaMemcpyPeerAsync");
        }
        s.state.store(full, std::memory_order_release);
        return true;
    }

    template <class Done>
    class waiter final : public polled_awaiter<waiter<Done>> {
    public:
        waiter(basic_peer_channel* c, Done d) : c_(c), done_(std::move(d)) {}
        waiter(waiter&& o) noexcept : c_(o.c_), done_(std::move(o.done_)) {}
        void await_resume()
        {
            if (error_) std::rethrow_exception(error_);
            if (c_->stop_.stop_requested()) throw operation_cancelled();
        }

    private:
        friend class polled_awaiter<waiter>;

        bool settle() noexcept
        {
            if (c_->stop_.stop_requested()) return true;
            try {
                return done_(*c_);
            } catch (...) {
                error_ = std::current_exception();
                return true;
            }
        }
        basic_peer_channel* c_;
        Done done_;
        std::exception_ptr error_{};
    };

    slot& at(int tag)
    {
        if (tag < 0 || tag >= tags_)
            throw error("peer_channel: tag " + std::to_string(tag) + " is outside [0, " + std::to_string(tags_) + ")");
        return slots_[static_cast<std::size_t>(tag)];
    }

    Copier copier_;
    int src_gpu_, dst_gpu_;
    stream_t stream_;
    Pool& pool_;
    std::mutex m_;
    std::vector<slot> slots_;
    int tags_ = -1;
    std::size_t copies_ = 0;
    std::stop_token stop_;  //!< the iteration's: its waits end once it is stopped
};

} // namespace tpipe::cuda
