#pragma once
// The NCCL GPU tests' payload (a vector of doubles in device memory from a tpipe::cuda::memory_pool)
// and stage (y = a x + b on the stage's stream, weight gradients in device memory), with the same
// integer-valued arithmetic on the host for the reference run.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "gpu_kernels.hpp"
#include "tpipe/cuda/current.hpp"
#include "tpipe/cuda/error.hpp"
#include "tpipe/cuda/memory_pool.hpp"
#include "tpipe/cuda/peer_payload.hpp"
#include "tpipe/exec/gradients.hpp"
#include "tpipe/exec/stage.hpp"

namespace gpu_test {

using hvec = std::vector<double>;

//! Where a receiving side's payloads come from: a pool, its GPU, a stream of that GPU.
struct pool_ref {
    tpipe::cuda::memory_pool* pool = nullptr;
    int gpu = 0;
    cudaStream_t stream = nullptr;
};

struct dev_vec {
    tpipe::cuda::device_buffer buf;
    std::size_t n = 0;
    double* data() const noexcept { return n ? buf.data_as<double>() : nullptr; }
};

inline dev_vec make_vec(pool_ref p, std::size_t n)
{
    dev_vec v;
    v.n = n;
    if (n) v.buf = p.pool->allocate(n * sizeof(double), p.gpu, p.stream);
    return v;
}

inline dev_vec upload(pool_ref p, const hvec& h)
{
    dev_vec v = make_vec(p, h.size());
    if (v.n) TPIPE_CUDA_TRY(cudaMemcpy(v.data(), h.data(), v.n * sizeof(double), cudaMemcpyHostToDevice));
    return v;
}

inline hvec download(const dev_vec& v)
{
    hvec h(v.n);
    if (v.n) TPIPE_CUDA_TRY(cudaMemcpy(h.data(), v.data(), v.n * sizeof(double), cudaMemcpyDeviceToHost));
    return h;
}

//! y = a x + b; the host twin (affine_host) computes the same.
struct affine {
    using input = dev_vec;
    using output = dev_vec;
    double a = 1, b = 0;
    pool_ref pool;
    dev_vec grad;  //!< 2 doubles on the device (da, db), for data parallelism
    std::map<int, dev_vec> saved;

    affine(double a_, double b_, pool_ref p) : a(a_), b(b_), pool(p)
    {
        grad = upload(pool, hvec{0, 0});
    }
    affine(affine&&) noexcept = default;

    dev_vec forward(const tpipe::unit& u, dev_vec x)
    {
        cudaStream_t s = tpipe::cuda::current_stream();
        pool_ref here = pool;
        here.stream = s;
        dev_vec y = make_vec(here, x.n);
        tpipe_nccl_gpu::affine(x.data(), y.data(), x.n, a, b, s);
        if (x.n) x.buf.use_on(s);
        saved[u.microbatch] = std::move(x);
        return y;
    }
    dev_vec backward(const tpipe::unit& u, dev_vec g)
    {
        cudaStream_t s = tpipe::cuda::current_stream();
        pool_ref here = pool;
        here.stream = s;
        dev_vec dx = make_vec(here, g.n);
        const dev_vec& x = saved.at(u.microbatch);
        tpipe_nccl_gpu::scale(g.data(), dx.data(), g.n, a, s);
        tpipe_nccl_gpu::accumulate(x.data(), g.data(), g.n, grad.data(), s);
        if (g.n) g.buf.use_on(s);
        return dx;
    }
    std::span<double> gradients() { return {grad.data(), 2}; }
};

struct affine_host {
    using input = hvec;
    using output = hvec;
    double a = 1, b = 0;
    hvec grad = {0, 0};
    std::map<int, hvec> saved;
    hvec forward(const tpipe::unit& u, hvec x)
    {
        hvec y(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) y[i] = a * x[i] + b;
        saved[u.microbatch] = std::move(x);
        return y;
    }
    hvec backward(const tpipe::unit& u, hvec g)
    {
        const hvec& x = saved.at(u.microbatch);
        hvec dx(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) {
            dx[i] = a * g[i];
            grad[0] += x[i] * g[i];
            grad[1] += g[i];
        }
        return dx;
    }
};

inline double coef_a(int stage) { return stage % 2 + 1; }
inline double coef_b(int stage) { return stage; }
//! Input of microbatch m of replica d: sizes 0..3 (microbatch 0 is empty), integer values.
inline hvec sample(int d, int m)
{
    hvec x(static_cast<std::size_t>(m % 4));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(d * 10 + m * 3 + int(i));
    return x;
}
inline hvec loss_grad(hvec y)
{
    for (double& v : y) v = double(static_cast<long long>(v) % 5 + 1);
    return y;
}

} // namespace gpu_test

template <>
struct tpipe::cuda::device_payload_traits<gpu_test::dev_vec> {
    struct header {
        std::uint64_t n;
    };
    static header header_of(const gpu_test::dev_vec& v) { return {v.n}; }
    static gpu_test::dev_vec make(const header& h, gpu_test::pool_ref& p) { return gpu_test::make_vec(p, static_cast<std::size_t>(h.n)); }
    static std::span<const std::byte> device_bytes(const gpu_test::dev_vec& v)
    {
        return {reinterpret_cast<const std::byte*>(v.data()), v.n * sizeof(double)};
    }
    static std::span<std::byte> device_bytes(gpu_test::dev_vec& v) { return {reinterpret_cast<std::byte*>(v.data()), v.n * sizeof(double)}; }
};
static_assert(tpipe::cuda::device_payload<gpu_test::dev_vec, gpu_test::pool_ref>);
