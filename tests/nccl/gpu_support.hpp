#pragma once
// The NCCL GPU tests' payload (a vector of doubles in device memory from a tpipe::cuda::memory_pool)
// and stage (y = a x + b on the stage's stream, weight gradients in device memory): the GPU twin
// of nccl_test::affine (affine.hpp), which makes the host reference run.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "affine.hpp"
#include "gpu_kernels.hpp"
#include "tpipe/cuda/current.hpp"
#include "tpipe/cuda/error_macros.hpp"
#include "tpipe/cuda/memory_pool.hpp"
#include "tpipe/transport/device_payload_traits.hpp"
#include "tpipe/exec/gradients.hpp"
#include "tpipe/exec/run.hpp"
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

using nccl_test::coef_a;
using nccl_test::coef_b;
using nccl_test::loss_grad;
using nccl_test::sample;

//! What a run delivered: outputs and input gradients per microbatch, stage gradients.
struct recorded {
    std::mutex m;
    std::map<int, hvec> out, dx;
    std::vector<hvec> grads;
};

//! The host run of `prog` over the samples of `replicas`, one after another (the reference).
inline void run_host(recorded& r, const tpipe::program& prog, int ranks, const std::vector<int>& replicas)
{
    tpipe::uniform_pipeline<nccl_test::affine> pipe(nccl_test::affine_stages(prog.stages()));
    tpipe::cpu_engine eng(ranks);
    for (int d : replicas) {
        tpipe::io_for<decltype(pipe)> io;
        io.source = [d](const tpipe::unit& u) { return sample(d, u.microbatch); };
        io.output_grad = [&](const tpipe::unit& u, hvec&& y) {
            r.out[u.microbatch] = y;
            return loss_grad(std::move(y));
        };
        io.input_grad = [&](const tpipe::unit& u, hvec&& dx) { r.dx[u.microbatch] = std::move(dx); };
        tpipe::run(pipe, prog, eng, io);
    }
    pipe.visit_stages([&](std::size_t, auto& s) { r.grads.push_back(s.grad); });
}

//! The GPU pipeline's I/O for replica d: inputs uploaded to `first`, loss gradients to `last`,
//! outputs and input gradients downloaded into r.
inline tpipe::io_for<tpipe::uniform_pipeline<affine>> device_io(pool_ref first, pool_ref last, int d, recorded& r)
{
    tpipe::io_for<tpipe::uniform_pipeline<affine>> io;
    io.source = [=](const tpipe::unit& u) { return upload(first, sample(d, u.microbatch)); };
    io.output_grad = [=, &r](const tpipe::unit& u, dev_vec&& y) {
        hvec h = download(y);
        {
            std::lock_guard<std::mutex> g(r.m);
            r.out[u.microbatch] = h;
        }
        return upload(last, loss_grad(std::move(h)));
    };
    io.input_grad = [&r](const tpipe::unit& u, dev_vec&& dx) {
        hvec h = download(dx);
        std::lock_guard<std::mutex> g(r.m);
        r.dx[u.microbatch] = std::move(h);
    };
    return io;
}

//! Stages of `n`, their payloads from `p`.
inline tpipe::uniform_pipeline<affine> make_pipe(int n, pool_ref p)
{
    std::vector<affine> st;
    for (int s = 0; s < n; ++s) st.emplace_back(coef_a(s), coef_b(s), p);
    return tpipe::uniform_pipeline<affine>(std::move(st));
}

} // namespace gpu_test

template <>
struct tpipe::device_payload_traits<gpu_test::dev_vec> {
    struct header {
        std::uint64_t n;
    };
    using pool = gpu_test::pool_ref;
    static header header_of(const gpu_test::dev_vec& v) { return {v.n}; }
    static gpu_test::dev_vec make(const header& h, gpu_test::pool_ref& p) { return gpu_test::make_vec(p, static_cast<std::size_t>(h.n)); }
    static std::span<const std::byte> device_bytes(const gpu_test::dev_vec& v)
    {
        return {reinterpret_cast<const std::byte*>(v.data()), v.n * sizeof(double)};
    }
    static std::span<std::byte> device_bytes(gpu_test::dev_vec& v) { return {reinterpret_cast<std::byte*>(v.data()), v.n * sizeof(double)}; }
};
static_assert(tpipe::device_payload<gpu_test::dev_vec, gpu_test::pool_ref>);
