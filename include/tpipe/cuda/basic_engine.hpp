#pragma once
// tpipe::cuda::basic_engine: a tpipe::engine whose devices are pipeline ranks placed on GPUs.
//
//   cuda::engine eng({.gpu_of_device = {0, 0, 0, 0}});        // 4 ranks on GPU 0, a stream each
//   tpipe::run(pipe, program, eng, io);
//   // in a stage: kernel<<<grid, block, 0, cuda::current_stream()>>>(...);
//
// - Each device (an engine device = where tpipe::run places a rank) has a GPU, a compute stream
//   (made by the engine, or the user's) and a transfer stream of its own (transfer_stream(d),
//   for the channels that copy between stages), all non-blocking.
// - Loops: one per device by default (fewer if asked: devices share loops in contiguous blocks,
//   as in cpu_engine).
// - compute(d, fn), awaited on the device's loop: makes the GPU current, sets current_stream()
//   and current_device() around fn (which enqueues its kernels), turns a launch error left by fn
//   (cudaGetLastError) into a cuda_error, then awaits the stream's work: by event polling from the
//   loop (completion_mode::event_poll, the default) or by a host function that only posts the
//   coroutine to its loop (completion_mode::host_func; the loop may sleep meanwhile). Either way
//   the coroutine resumes on its loop, never on a driver thread, with fn's result or the error.
// - reset(stop): once the iteration's stop token is stopped, every compute waiting for the GPU
//   resumes with tpipe::operation_cancelled (tpipe::run stops it when an iteration fails or its
//   watchdog fires, so a GPU that never finishes becomes the watchdog's error, not a hang).
// - Pools: events() (completion events, reused), memory() (device and pinned buffers).
#include <algorithm>
#include <atomic>
#include <concepts>
#include <coroutine>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/cuda/basic_after.hpp"
#include "tpipe/cuda/basic_current.hpp"
#include "tpipe/cuda/basic_memory_pool.hpp"
#include "tpipe/cuda/cuda_error.hpp"
#include "tpipe/cuda/driver.hpp"
#include "tpipe/cuda/event_pool.hpp"
#include "tpipe/cuda/host_func_wait.hpp"
#include "tpipe/async/on_stop.hpp"
#include "tpipe/exec/cancellable_engine.hpp"
#include "tpipe/exec/engine.hpp"
#include "tpipe/async/loop.hpp"
#include "tpipe/exec/reporting_engine.hpp"

namespace tpipe::cuda {

template <driver D>
struct basic_engine_options {
    //! The GPU of each engine device (pipeline ranks are placed on engine devices by
    //! run_options::device_of_rank); required. Several devices may share a GPU.
    std::vector<int> gpu_of_device;
    //! The compute stream of each device: empty (the engine makes them) or one per device, where a
    //! default-constructed (null) entry asks the engine to make that one. User streams must be on
    //! the device's GPU; the engine does not destroy them.
    std::vector<typename D::stream_type> compute_streams{};
    //! Loop threads; 0: one per device.
    int threads = 0;
    completion_mode completion = completion_mode::event_poll;
    //! The loops' idle spin; empty: cpu_engine::default_loop_options(threads).
    std::optional<loop::options> idle{};
    memory_pool_options memory{};
};

template <driver D>
class basic_engine {
public:
    using stream_type = typename D::stream_type;
    using options = basic_engine_options<D>;

    //! Refuses an empty placement, negative or absent GPUs, a stream list of the wrong length, a
    //! user stream on another GPU and a thread count outside [0, devices]; throws cuda_error if
    //! the driver cannot make the streams.
    basic_engine(D& d, options o) : d_(d), opts_(std::move(o)), events_(d), memory_(d, events_, opts_.memory), host_waits_(d)
    {
        const int n = static_cast<int>(opts_.gpu_of_device.size());
        if (n < 1)
            throw invalid_argument("cuda::engine: gpu_of_device is empty; give the GPU of each engine device, e.g. "
                                   "{0, 0, 1, 1} for 4 pipeline ranks on 2 GPUs");
        if (opts_.threads < 0 || opts_.threads > n)
            throw invalid_argument("cuda::engine: threads must be in [1, " + std::to_string(n) +
                                   "] (at most one per device) or 0 for one per device, got " + std::to_string(opts_.threads));
        if (!opts_.compute_streams.empty() && static_cast<int>(opts_.compute_streams.size()) != n)
            throw invalid_argument("cuda::engine: compute_streams has " + std::to_string(opts_.compute_streams.size()) +
                                   " entries for " + std::to_string(n) + " devices; give one per device (null: the "
                                   "engine makes it) or none");
        int gpus = 0;
        detail::check(d_, d_.device_count(&gpus), "cudaGetDeviceCount", "cuda::engine");
        for (int dev = 0; dev < n; ++dev) {
            const int g = opts_.gpu_of_device[static_cast<std::size_t>(dev)];
            if (g < 0 || g >= gpus)
                throw invalid_argument("cuda::engine: device " + std::to_string(dev) + " is placed on GPU " + std::to_string(g) +
                                       " but this machine has GPUs [0, " + std::to_string(gpus) + ")");
        }
        waiting_ = std::make_unique<std::atomic<int>[]>(static_cast<std::size_t>(n));
        devices_.reserve(static_cast<std::size_t>(n));
        try {
            for (int dev = 0; dev < n; ++dev) add_device(dev);
            const int threads = opts_.threads == 0 ? n : opts_.threads;
            const loop::options idle = opts_.idle ? *opts_.idle : cpu_engine::default_loop_options(threads);
            for (int t = 0; t < threads; ++t) loops_.push_back(std::make_unique<loop_thread>(idle));
        } catch (...) {
            loops_.clear();
            destroy_streams();
            throw;
        }
    }
    basic_engine(const basic_engine&) = delete;
    basic_engine& operator=(const basic_engine&) = delete;
    //! Stops the loops, then destroys the streams the engine made (the work on them may still
    //! run: the driver finishes it).
    ~basic_engine()
    {
        on_stop_.unwatch();
        loops_.clear();
        host_waits_.close();  // asks the streams which host functions will never run
        destroy_streams();
    }

    int devices() const noexcept { return static_cast<int>(devices_.size()); }
    int threads() const noexcept { return static_cast<int>(loops_.size()); }
    int thread_of(int device) const
    {
        check_device(device, "thread_of");
        return static_cast<int>(static_cast<long long>(device) * threads() / devices());
    }
    loop& loop_of(int device) { return loops_[static_cast<std::size_t>(thread_of(device))]->get(); }
    int gpu_of(int device) const { return at(device, "gpu_of").ctx.gpu; }
    stream_type compute_stream(int device) const { return at(device, "compute_stream").ctx.stream; }
    stream_type transfer_stream(int device) const { return at(device, "transfer_stream").transfer; }
    completion_mode completion() const noexcept { return opts_.completion; }

    basic_event_pool<D>& events() noexcept { return events_; }
    basic_memory_pool<D>& memory() noexcept { return memory_; }
    D& driver_ref() noexcept { return d_; }

    //! Its computes wait for the GPU: tpipe::run interrupts them (reset's stop token) and the
    //! watchdog reports what they wait for (waiting_for).
    static constexpr bool tpipe_cancellable_engine = true;
    static constexpr bool tpipe_reporting_engine = true;

    //! Starts an iteration: once `stop` is stopped (any thread), every compute waiting for the
    //! GPU resumes with operation_cancelled, and later ones do not wait. A default token never
    //! stops.
    void reset(std::stop_token stop)
    {
        on_stop_.unwatch();  // the last iteration's token must not cancel this one
        cancelled_.store(false, std::memory_order_release);
        on_stop_.watch(std::move(stop), canceller{this});
    }
    bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }

    //! What the computes of `device` wait for, empty if none waits for the GPU (any thread; the
    //! watchdog of tpipe::run puts it in its report).
    std::string waiting_for(int device) const
    {
        const device_state& s = at(device, "waiting_for");
        const int n = waiting_[static_cast<std::size_t>(device)].load(std::memory_order_relaxed);
        if (n == 0) return {};
        return "waits for the GPU: the work its stage function enqueued on the compute stream of " + s.name +
               " has not completed (" + std::to_string(n) + " compute" + (n > 1 ? "s" : "") + " waiting, " +
               (opts_.completion == completion_mode::event_poll ? "event polled" : "host function pending") + ")";
    }

    template <class F>
    class compute_awaiter {
    public:
        using result_type = std::invoke_result_t<F&>;

        compute_awaiter(basic_engine& e, int device, F fn) : e_(&e), dev_(&e.at(device, "compute")), fn_(std::move(fn)) {}
        compute_awaiter(const compute_awaiter&) = delete;
        compute_awaiter& operator=(const compute_awaiter&) = delete;

        //! Runs fn with the device's context and starts the wait; ready if fn failed or the GPU
        //! already finished.
        bool await_ready()
        {
            try {
                {
                    const int rc = e_->d_.set_device(dev_->ctx.gpu);
                    detail::check(e_->d_, rc, "cudaSetDevice", dev_->what);
                    detail::compute_scope<D> scope(dev_->ctx);
                    if constexpr (std::is_void_v<result_type>) fn_();
                    else result_.emplace(fn_());
                }
                const int launch = e_->d_.last_error();
                detail::check(e_->d_, launch, "a kernel launch (cudaGetLastError)",
                              dev_->what + ": the stage function's CUDA work could not be enqueued");
                if (e_->opts_.completion == completion_mode::host_func) {
                    host_.emplace(e_->host_waits_, e_->events_, e_->d_, dev_->ctx.stream, dev_->ctx.gpu, &dev_->what,
                                  &e_->cancelled_);
                    return host_->await_ready();
                }
                poll_.emplace(e_->events_, e_->d_, dev_->ctx.stream, dev_->ctx.gpu, &dev_->what, no_check{},
                              &e_->cancelled_);
                return poll_->await_ready();
            } catch (...) {
                error_ = std::current_exception();
                return true;
            }
        }
        bool await_suspend(std::coroutine_handle<> h)
        {
            std::atomic<int>& waiting = e_->waiting_[static_cast<std::size_t>(dev_->ctx.device)];
            waiting.fetch_add(1, std::memory_order_relaxed);
            suspended_ = true;
            try {
                return host_ ? host_->await_suspend(h) : poll_->await_suspend(h);
            } catch (...) {
                unmark();
                throw;
            }
        }
        result_type await_resume()
        {
            unmark();
            if (error_) std::rethrow_exception(error_);
            if (host_) host_->await_resume();
            if (poll_) poll_->await_resume();
            if constexpr (!std::is_void_v<result_type>) return std::move(*result_);
        }

    private:
        void unmark() noexcept
        {
            if (std::exchange(suspended_, false))
                e_->waiting_[static_cast<std::size_t>(dev_->ctx.device)].fetch_sub(1, std::memory_order_relaxed);
        }

        using stored = std::conditional_t<std::is_void_v<result_type>, char, result_type>;
        basic_engine* e_;
        const typename basic_engine::device_state* dev_;
        F fn_;
        std::optional<stored> result_{};
        std::optional<basic_after<D>> poll_{};
        std::optional<basic_host_func_wait<D>> host_{};
        std::exception_ptr error_{};
        bool suspended_ = false;
    };

    //! Runs fn on device `device`'s stream when awaited (on the device's loop) and resumes once the
    //! work it enqueued completed.
    template <std::invocable F>
    compute_awaiter<std::decay_t<F>> compute(int device, F&& fn)
    {
        return compute_awaiter<std::decay_t<F>>(*this, device, std::forward<F>(fn));
    }

private:
    struct device_state {
        compute_context<D> ctx;
        stream_type transfer{};
        bool owns_compute = false;
        std::string name;  //!< "device d (GPU g)"
        std::string what;  //!< name + " compute": names the work in errors
    };

    void check_device(int device, const char* call) const
    {
        if (device < 0 || device >= devices())
            throw invalid_argument("cuda::engine::" + std::string(call) + ": device " + std::to_string(device) +
                                   " is outside [0, " + std::to_string(devices()) + ")");
    }
    const device_state& at(int device, const char* call) const
    {
        check_device(device, call);
        return devices_[static_cast<std::size_t>(device)];
    }

    void add_device(int dev)
    {
        device_state s;
        s.ctx.device = dev;
        s.ctx.gpu = opts_.gpu_of_device[static_cast<std::size_t>(dev)];
        s.name = "device " + std::to_string(dev) + " (GPU " + std::to_string(s.ctx.gpu) + ")";
        s.what = s.name + " compute";
        detail::device_scope<D> on(d_, s.ctx.gpu);
        const stream_type user = opts_.compute_streams.empty() ? stream_type{} : opts_.compute_streams[static_cast<std::size_t>(dev)];
        if (user != stream_type{}) {
            int g = -1;
            detail::check(d_, d_.stream_device(user, &g), "cudaStreamGetDevice", "the user's compute stream of device " + std::to_string(dev));
            if (g != s.ctx.gpu)
                throw invalid_argument("cuda::engine: the compute stream given for device " + std::to_string(dev) + " is on GPU " +
                                       std::to_string(g) + " but the device is placed on GPU " + std::to_string(s.ctx.gpu));
            s.ctx.stream = user;
        } else {
            detail::check(d_, d_.stream_create(&s.ctx.stream), "cudaStreamCreateWithFlags", s.what + " stream");
            s.owns_compute = true;
        }
        devices_.push_back(s);
        detail::check(d_, d_.stream_create(&devices_.back().transfer), "cudaStreamCreateWithFlags",
                      "device " + std::to_string(dev) + " transfer stream");
    }

    void destroy_streams() noexcept
    {
        for (device_state& s : devices_) {
            if (s.owns_compute && s.ctx.stream != stream_type{}) (void)d_.stream_destroy(s.ctx.stream);
            if (s.transfer != stream_type{}) (void)d_.stream_destroy(s.transfer);
        }
        devices_.clear();
    }

    D& d_;
    options opts_;
    basic_event_pool<D> events_;
    basic_memory_pool<D> memory_;
    basic_host_func_waits<D> host_waits_;
    std::vector<device_state> devices_;
    std::unique_ptr<std::atomic<int>[]> waiting_;  //!< per device: computes suspended on the GPU
    std::vector<std::unique_ptr<loop_thread>> loops_;
    std::atomic<bool> cancelled_{false};

    //! The stop token's callback: host-function waits sleep, so they are posted; polled ones
    //! read cancelled_.
    void cancel() noexcept
    {
        cancelled_.store(true, std::memory_order_release);
        host_waits_.cancel_all();
    }
    struct canceller {
        basic_engine* e;
        void operator()() const noexcept { e->cancel(); }
    };
    on_stop<canceller> on_stop_;
};

} // namespace tpipe::cuda
