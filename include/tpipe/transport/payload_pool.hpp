#pragma once
// tpipe::payload_pool<T>: recycled payload objects, so that a transport that leaves the process
// receives a body into storage that is already allocated and touched, instead of allocating,
// zero-filling and page-faulting a fresh body per message (for a 64 MiB activation that costs
// more than moving it over shared memory).
//
// - A bounded, thread-safe cache of T objects keyed by body size in bytes. give(v, bytes) keeps
//   v if it is at least min_bytes (small bodies are cheaper to allocate than to share through
//   a mutex) and the cache stays within max_bytes and per_size objects of that size; else v is
//   destroyed. take(bytes) hands back a cached object of exactly that body size, or nothing.
// - Who feeds it: tpipe::linked_channel (between processes) gives back every payload whose send
//   completed, when payload_traits<T> opts in (tpipe::recyclable_payload); payload_traits<T>::make(h) takes from
//   it. So a pipeline rank that sends and receives activations of one shape (every middle stage,
//   and both ends of a ping-pong) receives into the bodies it sent. A stage that only consumes
//   may give its inputs back itself: tpipe::recycle(std::move(x)).
// - One pool per T per process (global()); tests and benchmarks read hits() and misses().
//
// Device memory: the same shape serves a GPU. tpipe::device_payload_traits<T>::make(h,
// pool) already receives into a tpipe::cuda::memory_pool, which caches device blocks by size
// class with stream-ordered reuse. A payload_pool<T> of device payloads would sit in front of
// it: give() on the send's completion event (not before: the copy may still read the body),
// take() in make(h, pool) before asking the memory pool. Nothing here is host-specific except
// that T's destructor frees the storage.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace tpipe {

template <class T>
class payload_pool {
public:
    struct limits {
        std::size_t min_bytes = std::size_t{64} << 10;  //!< smaller bodies are not cached
        std::size_t max_bytes = std::size_t{512} << 20; //!< bytes cached at most
        std::size_t per_size = 8;                       //!< objects of one body size at most
    };

    payload_pool() = default;
    explicit payload_pool(limits l) : limits_(l), min_bytes_(l.min_bytes) {}
    payload_pool(const payload_pool&) = delete;
    payload_pool& operator=(const payload_pool&) = delete;

    //! The process's pool of T.
    static payload_pool& global()
    {
        static payload_pool pool;
        return pool;
    }

    //! A cached object whose body has exactly `bytes` bytes, if there is one.
    std::optional<T> take(std::size_t bytes)
    {
        if (bytes < min_bytes_.load(std::memory_order_relaxed)) return std::nullopt;
        std::lock_guard lock(m_);
        for (std::size_t i = 0; i < cache_.size(); ++i)
            if (cache_[i].bytes == bytes) {
                std::optional<T> out(std::move(cache_[i].value));
                cache_[i] = std::move(cache_.back());
                cache_.pop_back();
                cached_bytes_ -= bytes;
                ++hits_;
                return out;
            }
        ++misses_;
        return std::nullopt;
    }

    //! Keeps `v` (whose body has `bytes` bytes) for a later take, within the limits.
    void give(T&& v, std::size_t bytes)
    {
        if (bytes < min_bytes_.load(std::memory_order_relaxed)) return;
        std::unique_lock lock(m_);
        std::size_t same = 0;
        for (const auto& e : cache_) same += e.bytes == bytes ? 1 : 0;
        if (same >= limits_.per_size || cached_bytes_ + bytes > limits_.max_bytes) {
            lock.unlock();  // destroyed here, outside the lock (freeing a large body takes time)
            T dropped(std::move(v));
            return;
        }
        cache_.push_back({bytes, std::move(v)});
        cached_bytes_ += bytes;
    }

    void set_limits(limits l)
    {
        std::lock_guard lock(m_);
        limits_ = l;
        min_bytes_.store(l.min_bytes, std::memory_order_relaxed);
    }

    //! Destroys every cached object.
    void clear()
    {
        std::vector<entry> gone;
        {
            std::lock_guard lock(m_);
            gone.swap(cache_);
            cached_bytes_ = 0;
        }
    }

    std::uint64_t hits() const
    {
        std::lock_guard lock(m_);
        return hits_;
    }
    std::uint64_t misses() const
    {
        std::lock_guard lock(m_);
        return misses_;
    }
    std::size_t cached_bytes() const
    {
        std::lock_guard lock(m_);
        return cached_bytes_;
    }

private:
    struct entry {
        std::size_t bytes;
        T value;
    };

    mutable std::mutex m_;
    limits limits_{};
    std::atomic<std::size_t> min_bytes_{limits{}.min_bytes};
    std::vector<entry> cache_;
    std::size_t cached_bytes_ = 0;
    std::uint64_t hits_ = 0, misses_ = 0;
};

} // namespace tpipe
