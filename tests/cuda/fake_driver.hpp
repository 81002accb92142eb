#pragma once
// A test double of the CUDA runtime for the engine's CPU tests (models tpipe::cuda::driver).
//
// - A stream is a FIFO of operations: work (a "kernel", enqueued by launch()), copies
//   (memcpy_peer_async, memcpy_async: the bytes land when the copy completes), event records, host
//   functions, and another library's kernels (enqueue_external: the fake NCCL's launches, which
//   start when the stream reaches them and complete when their library says so). Operations
//   complete in order, either when the test says so (complete(s, n),
//   complete_all()) or on a "device" thread (start_device()), or at once (set_immediate(true)).
// - An event completes when the operations before its record have: query() says not_ready
//   until then, and after a failed kernel on its stream (the stream is broken from then on,
//   as a sticky CUDA error), the kernel's error.
// - Host functions run on the thread that completes them (the device thread, as on a GPU: a
//   driver thread), and are skipped after a stream failure, as CUDA documents.
// - Injected errors: a launch error (cudaGetLastError of the launching thread, non-sticky),
//   a kernel or a peer copy that fails on the device (fail_copies), a memory limit for mallocs,
//   stalled streams (never complete: a hung GPU).
// - Counts: mallocs, frees, events created, host functions run, peer copies issued (copies()
//   counts memcpy_peer_async only).
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fake {

namespace code {
constexpr int success = 0;
constexpr int memory_allocation = 2;     // cudaErrorMemoryAllocation
constexpr int invalid_configuration = 9; // cudaErrorInvalidConfiguration
constexpr int invalid_device = 101;      // cudaErrorInvalidDevice
constexpr int not_ready = 600;           // cudaErrorNotReady
constexpr int illegal_address = 700;     // cudaErrorIllegalAddress
} // namespace code

struct stream_state;

//! Another library's kernel on a stream (the fake NCCL's launches). poll() is called, without the
//! driver's lock, each time the stream's first operation is this and the device looks at it:
//! the kernel runs from the first call on, and completes when poll() returns true.
class external_work {
public:
    virtual bool poll() = 0;

protected:
    ~external_work() = default;
};

struct event_state {
    int gpu = 0;
    std::uint64_t recorded = 0;   //!< generation of the last record
    std::uint64_t completed = 0;  //!< generation the last completed record had
    int error = 0;
};
struct op {
    enum kind_t { work, record, host, copy, external } kind = work;
    event_state* event = nullptr;
    std::uint64_t generation = 0;
    void (*fn)(void*) = nullptr;
    void* data = nullptr;  //!< host: fn's argument; copy: the destination
    int error = 0;         //!< work, copy: fails on the device with this code
    const void* source = nullptr;  //!< copy
    std::size_t bytes = 0;         //!< copy
    external_work* ext = nullptr;  //!< external
};
struct stream_state {
    int gpu = 0;
    std::deque<op> ops;
    int failed = 0;        //!< sticky error of a failed kernel
    bool stalled = false;  //!< never completes anything (a hung GPU)
    bool destroyed = false;
    std::size_t completed = 0;
};

class driver {
public:
    using stream_type = stream_state*;
    using event_type = event_state*;
    static constexpr int not_ready = code::not_ready;

    explicit driver(int gpus = 1) : gpus_(gpus) {}
    driver(const driver&) = delete;
    driver& operator=(const driver&) = delete;
    ~driver() { stop_device(); }

    // ---- the driver concept ----------------------------------------------------------------------
    int set_device(int gpu)
    {
        if (gpu < 0 || gpu >= gpus_) return code::invalid_device;
        current_gpu() = gpu;
        return 0;
    }
    int get_device(int* gpu)
    {
        *gpu = current_gpu();
        return 0;
    }
    int device_count(int* n)
    {
        *n = gpus_;
        return 0;
    }
    int stream_create(stream_type* s)
    {
        std::lock_guard<std::mutex> g(m_);
        streams_.push_back(std::make_unique<stream_state>());
        streams_.back()->gpu = current_gpu();
        *s = streams_.back().get();
        return 0;
    }
    int stream_destroy(stream_type s)
    {
        std::lock_guard<std::mutex> g(m_);
        s->destroyed = true;
        return 0;
    }
    int stream_device(stream_type s, int* gpu)
    {
        *gpu = s->gpu;
        return 0;
    }
    int stream_query(stream_type s)
    {
        std::lock_guard<std::mutex> g(m_);
        if (s->failed) return s->failed;
        return s->ops.empty() ? 0 : code::not_ready;
    }
    int event_create(event_type* e)
    {
        std::lock_guard<std::mutex> g(m_);
        events_.push_back(std::make_unique<event_state>());
        events_.back()->gpu = current_gpu();
        *e = events_.back().get();
        ++events_created_;
        return 0;
    }
    int event_destroy(event_type) { return 0; }
    int event_record(event_type e, stream_type s)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            e->error = 0;
            s->ops.push_back(op{op::record, e, ++e->recorded});
        }
        after_enqueue(s);
        return 0;
    }
    int event_query(event_type e)
    {
        std::lock_guard<std::mutex> g(m_);
        ++queries_;
        if (e->error) return e->error;
        return e->completed >= e->recorded ? 0 : code::not_ready;
    }
    int launch_host_func(stream_type s, void (*fn)(void*), void* data)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            s->ops.push_back(op{op::host, nullptr, 0, fn, data});
        }
        after_enqueue(s);
        return 0;
    }
    int last_error()
    {
        int& e = last_error_of_thread();
        const int r = e;
        e = 0;
        return r;
    }
    int malloc_device(void** p, std::size_t n) { return allocate(p, n, true); }
    int free_device(void* p) { return release(p); }
    int malloc_host(void** p, std::size_t n) { return allocate(p, n, false); }
    int free_host(void* p) { return release(p); }
    int memcpy_peer_async(void* dst, int, const void* src, int, std::size_t n, stream_type s) { return enqueue_copy(dst, src, n, s, true); }
    int memcpy_async(void* dst, const void* src, std::size_t n, stream_type s) { return enqueue_copy(dst, src, n, s, false); }
    const char* error_name(int e) const noexcept
    {
        switch (e) {
        case 0: return "cudaSuccess";
        case code::memory_allocation: return "cudaErrorMemoryAllocation";
        case code::invalid_configuration: return "cudaErrorInvalidConfiguration";
        case code::invalid_device: return "cudaErrorInvalidDevice";
        case code::not_ready: return "cudaErrorNotReady";
        case code::illegal_address: return "cudaErrorIllegalAddress";
        default: return "cudaErrorUnknown";
        }
    }
    const char* error_string(int e) const noexcept
    {
        switch (e) {
        case 0: return "no error";
        case code::memory_allocation: return "out of memory";
        case code::invalid_configuration: return "invalid configuration argument";
        case code::invalid_device: return "invalid device ordinal";
        case code::not_ready: return "device not ready";
        case code::illegal_address: return "an illegal memory access was encountered";
        default: return "unknown error";
        }
    }

    // ---- what a stage's kernels do ----------------------------------------------------------------
    //! A kernel launch on `s` (from the calling thread). The launch fails (cudaGetLastError of
    //! this thread, nothing enqueued) while fail_launches() > 0; the kernel fails on the device
    //! with `device_error` (the stream breaks).
    void launch(stream_type s, int device_error = 0)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            ++launches_;
            if (failing_launches_ > 0) {
                --failing_launches_;
                last_error_of_thread() = code::invalid_configuration;
                return;
            }
            s->ops.push_back(op{op::work, nullptr, 0, nullptr, nullptr, device_error});
        }
        after_enqueue(s);
    }
    //! Another library's kernel on `s` (it must outlive its completion, or the device's stop).
    void enqueue_external(stream_type s, external_work& w)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            op o{op::external};
            o.ext = &w;
            s->ops.push_back(o);
        }
        after_enqueue(s);
    }
    //! The next n peer copies fail on the device with `error` (the stream breaks).
    void fail_copies(int n, int error = code::illegal_address)
    {
        std::lock_guard<std::mutex> g(m_);
        failing_copies_ = n;
        copy_error_ = error;
    }
    //! The next n launches fail with cudaErrorInvalidConfiguration (a non-sticky launch error).
    void fail_launches(int n)
    {
        std::lock_guard<std::mutex> g(m_);
        failing_launches_ = n;
    }

    // ---- the device ---------------------------------------------------------------------------
    //! Completes up to n operations of `s` (fewer if it is stalled or runs out); returns how many.
    std::size_t complete(stream_type s, std::size_t n = 1)
    {
        std::size_t done = 0;
        while (done < n && step(s)) ++done;
        return done;
    }
    //! Completes everything that can be completed now, on this thread.
    void complete_all()
    {
        for (bool any = true; any;) {
            any = false;
            for (stream_type s : all_streams())
                while (step(s)) any = true;
        }
    }
    //! Operations complete when they are enqueued, on the enqueuing thread (host functions too).
    void set_immediate(bool on) { immediate_.store(on); }
    //! A thread that completes operations as they come (host functions run on it).
    void start_device()
    {
        stop_device();
        running_.store(true);
        device_ = std::thread([this] {
            while (running_.load()) {
                bool any = false;
                for (stream_type s : all_streams())
                    for (int k = 0; k < 64 && step(s); ++k) any = true;
                if (!any) {
                    std::unique_lock<std::mutex> lk(m_);
                    cv_.wait_for(lk, std::chrono::milliseconds(1), [&] { return !running_.load() || pending_locked(); });
                }
            }
        });
    }
    void stop_device()
    {
        if (!device_.joinable()) return;
        running_.store(false);
        cv_.notify_all();
        device_.join();
    }
    void stall(stream_type s, bool on = true)
    {
        std::lock_guard<std::mutex> g(m_);
        s->stalled = on;
    }
    std::size_t queued(stream_type s)
    {
        std::lock_guard<std::mutex> g(m_);
        return s->ops.size();
    }

    // ---- memory -----------------------------------------------------------------------------
    //! Device/pinned mallocs beyond this many bytes live fail with cudaErrorMemoryAllocation.
    void set_memory_limit(std::size_t bytes)
    {
        std::lock_guard<std::mutex> g(m_);
        memory_limit_ = bytes;
    }

    // ---- counts -----------------------------------------------------------------------------
    std::size_t mallocs() const { return mallocs_.load(); }
    std::size_t frees() const { return frees_.load(); }
    std::size_t events_created() const { return events_created_.load(); }
    std::size_t host_funcs_run() const { return host_runs_.load(); }
    std::size_t launches() const { return launches_.load(); }
    std::size_t copies() const { return copies_.load(); }
    std::size_t bytes_live()
    {
        std::lock_guard<std::mutex> g(m_);
        return live_bytes_;
    }

private:
    static int& current_gpu()
    {
        static thread_local int gpu = 0;
        return gpu;
    }
    static int& last_error_of_thread()
    {
        static thread_local int e = 0;
        return e;
    }

    std::vector<stream_type> all_streams()
    {
        std::lock_guard<std::mutex> g(m_);
        std::vector<stream_type> v;
        v.reserve(streams_.size());
        for (auto& s : streams_) v.push_back(s.get());
        return v;
    }
    //! Whether a stream has an operation the device can complete now (an external one waits for
    //! its library: the device looks at it again after a millisecond or the next enqueue).
    bool pending_locked() const
    {
        for (auto& s : streams_)
            if (!s->stalled && !s->ops.empty() && s->ops.front().kind != op::external) return true;
        return false;
    }

    int enqueue_copy(void* dst, const void* src, std::size_t n, stream_type s, bool peer)
    {
        {
            std::lock_guard<std::mutex> g(m_);
            int error = 0;
            if (peer) {
                ++copies_;
                if (failing_copies_ > 0) {
                    --failing_copies_;
                    error = copy_error_;
                }
            }
            s->ops.push_back(op{op::copy, nullptr, 0, nullptr, dst, error, src, n});
        }
        after_enqueue(s);
        return 0;
    }

    void after_enqueue(stream_type s)
    {
        if (immediate_.load()) {
            while (step(s)) {
            }
        } else if (device_.joinable()) {
            cv_.notify_one();
        }
    }

    //! Completes the first operation of `s`; false if there is none or `s` is stalled.
    bool step(stream_type s)
    {
        std::unique_lock<std::mutex> lk(m_);
        if (s->stalled || s->ops.empty()) return false;
        if (s->ops.front().kind == op::external && !s->failed) {  // a broken stream runs no kernel
            external_work* w = s->ops.front().ext;
            lk.unlock();
            const bool done = w->poll();
            lk.lock();
            if (!done || s->ops.empty() || s->ops.front().ext != w) return false;
        }
        const op o = s->ops.front();
        s->ops.pop_front();
        ++s->completed;
        switch (o.kind) {
        case op::work:
            if (o.error && !s->failed) s->failed = o.error;
            break;
        case op::copy:
            if (s->failed) break;  // a broken stream runs nothing more
            if (o.error) s->failed = o.error;
            else std::memcpy(o.data, o.source, o.bytes);
            break;
        case op::record:
            if (s->failed) o.event->error = s->failed;
            else if (o.generation > o.event->completed) o.event->completed = o.generation;
            break;
        case op::external: break;
        case op::host:
            if (s->failed) break;  // CUDA does not run host functions after a stream error
            lk.unlock();
            ++host_runs_;
            o.fn(o.data);
            break;
        }
        return true;
    }

    int allocate(void** p, std::size_t n, bool /*device*/)
    {
        std::lock_guard<std::mutex> g(m_);
        if (live_bytes_ + n > memory_limit_) {
            last_error_of_thread() = code::memory_allocation;
            *p = nullptr;
            return code::memory_allocation;
        }
        auto block = std::make_unique<std::byte[]>(n);
        *p = block.get();
        sizes_.push_back({*p, n});
        blocks_.push_back(std::move(block));
        live_bytes_ += n;
        ++mallocs_;
        return 0;
    }
    int release(void* p)
    {
        std::lock_guard<std::mutex> g(m_);
        for (std::size_t i = 0; i < blocks_.size(); ++i)
            if (blocks_[i].get() == p) {
                live_bytes_ -= sizes_[i].second;
                blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
                sizes_.erase(sizes_.begin() + static_cast<std::ptrdiff_t>(i));
                ++frees_;
                return 0;
            }
        return 1;  // cudaErrorInvalidValue: not a pointer of this driver
    }

    const int gpus_;
    std::mutex m_;
    std::condition_variable cv_;
    std::vector<std::unique_ptr<stream_state>> streams_;
    std::vector<std::unique_ptr<event_state>> events_;
    std::vector<std::unique_ptr<std::byte[]>> blocks_;
    std::vector<std::pair<void*, std::size_t>> sizes_;
    std::size_t live_bytes_ = 0, memory_limit_ = ~std::size_t{0};
    int failing_launches_ = 0, failing_copies_ = 0, copy_error_ = 0;
    std::atomic<bool> immediate_{false}, running_{false};
    std::atomic<std::size_t> mallocs_{0}, frees_{0}, events_created_{0}, host_runs_{0}, launches_{0}, queries_{0}, copies_{0};
    std::thread device_;
};

} // namespace fake
