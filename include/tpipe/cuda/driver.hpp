#pragma once
// The driver seam: the handful of CUDA runtime calls that the engine, the completion awaitable,
// the event pool, the memory pool, the peer copies between GPUs (tpipe::cuda::driver_copier) and
// the streams, markers and buffers of tpipe's NCCL code (tpipe::nccl::device_calls) make. They
// are templates over a Driver so that their logic
// runs on the CPU against a test double (tests/cuda/fake_driver.hpp); runtime_driver.hpp is the
// real one and the only generic-side header that includes the CUDA runtime.
//
// Every call returns an int status: 0 is success, D::not_ready is "the event has not completed
// yet" (cudaErrorNotReady), anything else an error whose name and text D gives. The calls are
// made on the thread that needs them, never from a host function (a host function may not call
// the CUDA API).
#include <concepts>
#include <cstddef>
#include <string>

#include "tpipe/cuda/cuda_error.hpp"

namespace tpipe::cuda {

template <class D>
concept driver = requires(D& d, typename D::stream_type s, typename D::event_type e, typename D::stream_type* sp,
                          typename D::event_type* ep, void** pp, void* p, const void* cp, std::size_t n, int gpu, int* ip,
                          void (*fn)(void*)) {
    requires std::copyable<typename D::stream_type>;
    requires std::copyable<typename D::event_type>;
    { D::not_ready } -> std::convertible_to<int>;
    { d.set_device(gpu) } -> std::same_as<int>;
    { d.get_device(ip) } -> std::same_as<int>;
    { d.device_count(ip) } -> std::same_as<int>;
    { d.stream_create(sp) } -> std::same_as<int>;      //!< non-blocking stream on the current GPU
    { d.stream_destroy(s) } -> std::same_as<int>;
    { d.stream_device(s, ip) } -> std::same_as<int>;   //!< the GPU a stream belongs to
    { d.stream_query(s) } -> std::same_as<int>;        //!< 0 idle, not_ready (leaves no last error), or the stream's error
    { d.event_create(ep) } -> std::same_as<int>;       //!< timing disabled, on the current GPU
    { d.event_destroy(e) } -> std::same_as<int>;
    { d.event_record(e, s) } -> std::same_as<int>;
    { d.event_query(e) } -> std::same_as<int>;         //!< 0 done, not_ready (leaves no last error), or the stream's error
    { d.launch_host_func(s, fn, p) } -> std::same_as<int>;
    { d.last_error() } -> std::same_as<int>;           //!< cudaGetLastError: returns and clears
    { d.malloc_device(pp, n) } -> std::same_as<int>;   //!< on the current GPU
    { d.free_device(p) } -> std::same_as<int>;
    { d.malloc_host(pp, n) } -> std::same_as<int>;     //!< pinned
    { d.free_host(p) } -> std::same_as<int>;
    { d.memcpy_peer_async(p, gpu, cp, gpu, n, s) } -> std::same_as<int>;  //!< cudaMemcpyPeerAsync (dst, dst GPU, src, src GPU)
    { d.memcpy_async(p, cp, n, s) } -> std::same_as<int>;  //!< cudaMemcpyAsync, cudaMemcpyDefault (either side host or device)
    { d.error_name(0) } -> std::convertible_to<const char*>;
    { d.error_string(0) } -> std::convertible_to<const char*>;
};

namespace detail {
//! Throws cuda_error for a failed status: "<call> failed: <name>: <text>[ (<context>)]". Like
//! TPIPE_CUDA_TRY it first clears the thread's last error, so that a non-sticky failure does not
//! resurface in an unrelated later call (a kernel launch check).
template <driver D>
void check(D& d, int status, const char* call, const std::string& context = {})
{
    if (status == 0) return;
    (void)d.last_error();
    std::string m = std::string(call) + " failed: " + d.error_name(status) + ": " + d.error_string(status);
    if (!context.empty()) m += " (" + context + ")";
    throw cuda_error(m, status, call);
}

//! Makes `gpu` current on this thread for its scope and restores the previous one.
template <driver D>
class device_scope {
public:
    device_scope(D& d, int gpu) : d_(d)
    {
        check(d_, d_.get_device(&previous_), "cudaGetDevice");
        if (previous_ != gpu) check(d_, d_.set_device(gpu), "cudaSetDevice", "GPU " + std::to_string(gpu));
    }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;
    ~device_scope() { (void)d_.set_device(previous_); }

private:
    D& d_;
    int previous_ = 0;
};
} // namespace detail

} // namespace tpipe::cuda
