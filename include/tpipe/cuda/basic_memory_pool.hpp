#pragma once
// tpipe::cuda::basic_memory_pool: device memory and pinned host staging from size classes, with
// stream-ordered reuse, so that a steady-state iteration allocates nothing from the driver.
//
// - Sizes round up to a multiple of 512 B up to 1 MiB and of 2 MiB beyond (as PyTorch's caching
//   allocator rounds); a cached block serves requests of its rounded size, on its GPU and kind.
// - A buffer belongs to the stream it was allocated for. Freed, its block is reusable at once by
//   that stream (later work on it is ordered after the earlier use), and by another stream only
//   once an event recorded at free time on every stream that used it has completed (as PyTorch
//   does for record_stream). device_buffer::use_on(s) declares another stream (a transfer).
// - Counts of driver allocations and frees, and of bytes in use and cached, for tests.
// - Bad sizes are refused with tpipe::invalid_argument; a driver allocation that fails even after
//   the idle cached blocks were returned to the driver is a cuda_error naming the size and the
//   pool's state.
// Thread-safe. The pool must outlive its buffers.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"

namespace tpipe::cuda {

enum class memory_kind { device, pinned_host };

inline const char* to_string(memory_kind k) noexcept { return k == memory_kind::device ? "device" : "pinned host"; }

//! What a pool holds: driver calls so far and bytes now.
struct memory_pool_stats {
    std::size_t driver_allocations = 0;
    std::size_t driver_frees = 0;
    std::size_t bytes_in_use = 0;   //!< rounded sizes of the live buffers
    std::size_t bytes_cached = 0;   //!< rounded sizes of the blocks waiting for reuse
    std::size_t blocks_in_use = 0;
    std::size_t blocks_cached = 0;
};

inline std::string to_string(const memory_pool_stats& s)
{
    return std::to_string(s.bytes_in_use) + " bytes in use in " + std::to_string(s.blocks_in_use) + " blocks, " +
           std::to_string(s.bytes_cached) + " bytes cached in " + std::to_string(s.blocks_cached) + " blocks, " +
           std::to_string(s.driver_allocations) + " driver allocations and " + std::to_string(s.driver_frees) +
           " frees so far";
}

struct memory_pool_options {
    //! The largest request accepted (a bigger one is refused as a bug, e.g. a negative size cast).
    std::size_t max_bytes = std::size_t{1} << 40;  // 1 TiB
};

template <driver D>
class basic_memory_pool;

//! An owning handle of a block of a basic_memory_pool: movable, returns its block on destruction.
template <driver D>
class basic_device_buffer {
public:
    using stream_type = typename D::stream_type;

    basic_device_buffer() = default;
    basic_device_buffer(basic_device_buffer&& o) noexcept
        : pool_(std::exchange(o.pool_, nullptr)), block_(std::exchange(o.block_, nullptr)), bytes_(std::exchange(o.bytes_, 0))
    {
    }
    basic_device_buffer& operator=(basic_device_buffer&& o) noexcept
    {
        if (this != &o) {
            reset();
            pool_ = std::exchange(o.pool_, nullptr);
            block_ = std::exchange(o.block_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    basic_device_buffer(const basic_device_buffer&) = delete;
    basic_device_buffer& operator=(const basic_device_buffer&) = delete;
    ~basic_device_buffer() { reset(); }

    //! Returns the block to its pool now (the handle becomes empty).
    void reset() noexcept
    {
        if (pool_) std::exchange(pool_, nullptr)->give_back(std::exchange(block_, nullptr));
        bytes_ = 0;
    }

    explicit operator bool() const noexcept { return block_ != nullptr; }
    //! Bytes asked for (the block may be larger: capacity()).
    std::size_t bytes() const noexcept { return bytes_; }
    std::size_t capacity() const noexcept;
    void* data() const noexcept;
    template <class T>
    T* data_as() const noexcept
    {
        return static_cast<T*>(data());
    }
    //! The GPU the memory is on (for pinned host memory: the GPU of the stream it was made for).
    int device() const noexcept;
    memory_kind kind() const noexcept;
    //! The stream the buffer was allocated for.
    stream_type stream() const noexcept;
    //! Declares that work on `s` (another stream) uses the buffer: its reuse then also waits for
    //! the work enqueued on `s` before the free (PyTorch's record_stream).
    void use_on(stream_type s);

private:
    friend class basic_memory_pool<D>;
    struct block;
    basic_device_buffer(basic_memory_pool<D>* p, block* b, std::size_t n) noexcept : pool_(p), block_(b), bytes_(n) {}

    basic_memory_pool<D>* pool_ = nullptr;
    block* block_ = nullptr;
    std::size_t bytes_ = 0;
};

template <driver D>
struct basic_device_buffer<D>::block {
    using event_type = typename D::event_type;
    void* ptr = nullptr;
    std::size_t size = 0;  //!< rounded
    int gpu = 0;
    memory_kind kind = memory_kind::device;
    stream_type stream{};                 //!< the stream of its current (or last) owner
    std::vector<stream_type> also_used;   //!< use_on streams of the current owner
    std::vector<event_type> freed;        //!< events recorded at the last free (pending reuse)
    bool cross_stream = false;            //!< the last owner used it on other streams too
};

template <driver D>
class basic_memory_pool {
public:
    using stream_type = typename D::stream_type;
    using event_type = typename D::event_type;
    using buffer = basic_device_buffer<D>;
    using options = memory_pool_options;

    //! Sizes are rounded to this granularity up to `small_limit`, and to `large_granularity` beyond.
    static constexpr std::size_t small_granularity = 512;
    static constexpr std::size_t small_limit = std::size_t{1} << 20;
    static constexpr std::size_t large_granularity = std::size_t{2} << 20;

    basic_memory_pool(D& d, basic_event_pool<D>& events, options o = {}) : d_(d), events_(events), opts_(o) {}
    basic_memory_pool(const basic_memory_pool&) = delete;
    basic_memory_pool& operator=(const basic_memory_pool&) = delete;
    ~basic_memory_pool()
    {
        std::lock_guard<std::mutex> g(m_);
        for (auto& b : blocks_) {
            for (event_type e : b->freed) events_.release(b->gpu, e);
            b->freed.clear();
            driver_free(*b);
        }
    }

    //! The size class of a request of `bytes`.
    static std::size_t rounded(std::size_t bytes) noexcept
    {
        const std::size_t g = bytes <= small_limit ? small_granularity : large_granularity;
        return (bytes + g - 1) / g * g;
    }

    //! `bytes` of `kind` memory on `gpu`, for work on `stream` (a stream of `gpu`).
    buffer allocate(std::size_t bytes, int gpu, stream_type stream, memory_kind kind = memory_kind::device)
    {
        if (bytes == 0)
            throw invalid_argument("memory_pool::allocate: 0 bytes asked for; ask for at least 1 byte (an empty "
                                   "tensor needs no buffer)");
        if (bytes > opts_.max_bytes)
            throw invalid_argument("memory_pool::allocate: " + std::to_string(bytes) + " bytes asked for, more than the pool's limit of " +
                                   std::to_string(opts_.max_bytes) + " bytes (memory_pool_options::max_bytes); a size "
                                   "this large is usually a negative value cast to size_t");
        if (gpu < 0) throw invalid_argument("memory_pool::allocate: GPU " + std::to_string(gpu) + " is negative; pass a GPU index >= 0");
        const std::size_t size = rounded(bytes);
        std::lock_guard<std::mutex> g(m_);
        typename buffer::block* b = take_cached(size, gpu, kind, stream);
        if (!b) b = fresh(size, gpu, kind);
        b->stream = stream;
        ++stats_.blocks_in_use;
        stats_.bytes_in_use += b->size;
        return buffer(this, b, bytes);
    }

    memory_pool_stats stats() const
    {
        std::lock_guard<std::mutex> g(m_);
        return stats_;
    }

    //! Returns every cached block whose reuse events completed to the driver.
    void release_cached()
    {
        std::lock_guard<std::mutex> g(m_);
        trim(nullptr);
    }

private:
    friend class basic_device_buffer<D>;
    using block = typename buffer::block;
    using key = std::tuple<int, memory_kind, std::size_t>;  // GPU, kind, rounded size

    //! A cached block usable by `stream` now, or null. Checks the events of the blocks it looks at.
    block* take_cached(std::size_t size, int gpu, memory_kind kind, stream_type stream)
    {
        auto it = free_.find(key{gpu, kind, size});
        if (it == free_.end()) return nullptr;
        std::vector<block*>& list = it->second;
        // Newest first: a block this stream just freed is the likeliest to be usable at once.
        for (std::size_t k = list.size(); k-- > 0;) {
            block* b = list[k];
            if (!reusable(*b, stream)) continue;
            list.erase(list.begin() + static_cast<std::ptrdiff_t>(k));
            for (event_type e : b->freed) events_.release(b->gpu, e);
            b->freed.clear();
            --stats_.blocks_cached;
            stats_.bytes_cached -= b->size;
            return b;
        }
        return nullptr;
    }

    //! Same stream and only used there: stream order suffices. Otherwise every free event done.
    bool reusable(block& b, stream_type stream) noexcept
    {
        if (!b.cross_stream && b.stream == stream) return true;
        for (event_type e : b.freed)
            if (d_.event_query(e) != 0) return false;  // pending, or failed work: not safe to hand out
        return true;
    }

    block* fresh(std::size_t size, int gpu, memory_kind kind)
    {
        blocks_.reserve(blocks_.size() + 1);  // before the driver call: no leak if this throws
        void* p = nullptr;
        int rc = driver_malloc(&p, size, gpu, kind);
        if (rc != 0) {
            (void)d_.last_error();  // clear the failure before retrying
            trim(&gpu);
            rc = driver_malloc(&p, size, gpu, kind);
        }
        if (rc != 0) {
            (void)d_.last_error();
            const std::string call = kind == memory_kind::device ? "cudaMalloc" : "cudaMallocHost";
            throw cuda_error("memory_pool: " + call + " of " + std::to_string(size) + " bytes of " + to_string(kind) +
                                 " memory for GPU " + std::to_string(gpu) + " failed: " + d_.error_name(rc) + ": " +
                                 d_.error_string(rc) + " (after returning the idle cached blocks; pool: " +
                                 to_string(stats_) + ")",
                             rc, call);
        }
        ++stats_.driver_allocations;
        auto b = std::make_unique<block>();
        b->ptr = p;
        b->size = size;
        b->gpu = gpu;
        b->kind = kind;
        blocks_.push_back(std::move(b));
        return blocks_.back().get();
    }

    int driver_malloc(void** p, std::size_t size, int gpu, memory_kind kind)
    {
        detail::device_scope<D> on(d_, gpu);
        return kind == memory_kind::device ? d_.malloc_device(p, size) : d_.malloc_host(p, size);
    }

    void driver_free(block& b) noexcept
    {
        (void)(b.kind == memory_kind::device ? d_.free_device(b.ptr) : d_.free_host(b.ptr));
        ++stats_.driver_frees;
    }

    //! Frees to the driver the cached blocks (of `gpu`, or all) whose free events completed.
    void trim(const int* gpu) noexcept
    {
        for (auto& [k, list] : free_) {
            if (gpu && std::get<0>(k) != *gpu) continue;
            std::erase_if(list, [&](block* b) {
                for (event_type e : b->freed)
                    if (d_.event_query(e) != 0) return false;
                for (event_type e : b->freed) events_.release(b->gpu, e);
                b->freed.clear();
                --stats_.blocks_cached;
                stats_.bytes_cached -= b->size;
                driver_free(*b);
                forget(b);
                return true;
            });
        }
    }

    void forget(block* b) noexcept
    {
        auto it = std::find_if(blocks_.begin(), blocks_.end(), [&](const auto& p) { return p.get() == b; });
        if (it != blocks_.end()) blocks_.erase(it);
    }

    //! A buffer's destructor: record the free on every stream that used the block, cache it.
    void give_back(block* b) noexcept
    {
        std::lock_guard<std::mutex> g(m_);
        --stats_.blocks_in_use;
        stats_.bytes_in_use -= b->size;
        b->cross_stream = !b->also_used.empty();
        bool recorded = record_free(*b, b->stream);
        for (stream_type s : b->also_used) recorded = recorded && record_free(*b, s);
        b->also_used.clear();
        try {
            if (recorded) {
                free_[key{b->gpu, b->kind, b->size}].push_back(b);
                ++stats_.blocks_cached;
                stats_.bytes_cached += b->size;
                return;
            }
        } catch (...) {
        }
        // Without a free event the block's last use cannot be waited for; cudaFree/cudaFreeHost
        // synchronize with the device, so returning it to the driver is safe.
        for (event_type e : b->freed) events_.release(b->gpu, e);
        b->freed.clear();
        driver_free(*b);
        forget(b);
    }

    bool record_free(block& b, stream_type s) noexcept
    {
        try {
            event_type e = events_.acquire(b.gpu);
            if (d_.event_record(e, s) != 0) {
                (void)d_.last_error();
                events_.release(b.gpu, e);
                return false;
            }
            b.freed.push_back(e);
            return true;
        } catch (...) {
            return false;
        }
    }

    void use_on(block* b, stream_type s)
    {
        std::lock_guard<std::mutex> g(m_);
        if (s != b->stream && std::find(b->also_used.begin(), b->also_used.end(), s) == b->also_used.end())
            b->also_used.push_back(s);
    }

    D& d_;
    basic_event_pool<D>& events_;
    options opts_;
    mutable std::mutex m_;
    std::vector<std::unique_ptr<block>> blocks_;  //!< every block the pool holds (in use or cached)
    std::map<key, std::vector<block*>> free_;
    memory_pool_stats stats_{};
};

template <driver D>
std::size_t basic_device_buffer<D>::capacity() const noexcept { return block_ ? block_->size : 0; }
template <driver D>
void* basic_device_buffer<D>::data() const noexcept { return block_ ? block_->ptr : nullptr; }
template <driver D>
int basic_device_buffer<D>::device() const noexcept { return block_ ? block_->gpu : -1; }
template <driver D>
memory_kind basic_device_buffer<D>::kind() const noexcept { return block_ ? block_->kind : memory_kind::device; }
template <driver D>
typename D::stream_type basic_device_buffer<D>::stream() const noexcept { return block_ ? block_->stream : stream_type{}; }
template <driver D>
void basic_device_buffer<D>::use_on(stream_type s)
{
    if (!block_) throw error("device_buffer::use_on: the buffer is empty (moved from or reset)");
    pool_->use_on(block_, s);
}

} // namespace tpipe::cuda
