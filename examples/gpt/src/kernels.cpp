#include "gpt/kernels.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gpt {

// ---- thread pool ---------------------------------------------------------------------------
thread_pool::thread_pool(int threads) : threads_(threads < 1 ? 1 : threads)
{
    try {
        for (int i = 1; i < threads_; ++i) workers_.emplace_back([this] { work_loop(); });
    } catch (const std::system_error& e) {
        // The destructor does not run for a half-built pool: stop the workers already started
        // here, or they would wait forever (and their std::thread would terminate the process).
        const auto started = workers_.size();
        stop_workers();
        throw std::runtime_error("gpt::thread_pool: could start only " + std::to_string(started + 1) + " of " +
                                 std::to_string(threads_) + " threads (" + e.what() + "); use fewer threads");
    }
}

thread_pool::~thread_pool() { stop_workers(); }

void thread_pool::stop_workers()
{
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
    workers_.clear();
}

void thread_pool::drain(const std::function<void(int)>* job, int tasks)
{
    for (;;) {
        int i = next_.fetch_add(1, std::memory_order_relaxed);
        if (i >= tasks) return;
        try {
            (*job)(i);
        } catch (...) {
            std::lock_guard lk(mu_);
            if (!error_) error_ = std::current_exception();
        }
        done_.fetch_add(1, std::memory_order_acq_rel);
    }
}

void thread_pool::work_loop()
{
    std::uint64_t seen = 0;
    for (;;) {
        const std::function<void(int)>* job = nullptr;
        int tasks = 0;
        {
            std::unique_lock lk(mu_);
            wake_.wait(lk, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            tasks = tasks_;
            ++active_;
        }
        if (job) drain(job, tasks);
        {
            std::lock_guard lk(mu_);
            --active_;
        }
        done_cv_.notify_all();
    }
}

void thread_pool::run(int tasks, const std::function<void(int)>& fn)
{
    if (tasks <= 0) return;
    if (threads_ == 1 || tasks == 1) {
        for (int i = 0; i < tasks; ++i) fn(i);
        return;
    }
    {
        std::unique_lock lk(mu_);
        done_cv_.wait(lk, [&] { return active_ == 0; });  // no worker still inside an earlier job
        job_ = &fn;
        tasks_ = tasks;
        next_.store(0, std::memory_order_relaxed);
        done_.store(0, std::memory_order_relaxed);
        error_ = nullptr;
        ++generation_;
    }
    wake_.notify_all();
    drain(&fn, tasks);
    std::exception_ptr err;
    {
        std::unique_lock lk(mu_);
        // Wait until every task ran and no worker still holds this job.
        done_cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire) == tasks && active_ == 0; });
        err = error_;
        job_ = nullptr;
    }
    if (err) std::rethrow_exception(err);
}

// ---- GEMM ----------------------------------------------------------------------------------
namespace {

template <class T>
struct vec_of;
template <>
struct vec_of<float> {
    typedef float type __attribute__((vector_size(32)));
};
template <>
struct vec_of<double> {
    typedef double type __attribute__((vector_size(32)));
};

constexpr std::int64_t MR = 6;
constexpr std::int64_t KC = 256;
constexpr std::int64_t MC = 120;  // multiple of MR
constexpr std::int64_t NC = 2048;

template <class T>
constexpr std::int64_t width = 32 / sizeof(T);
template <class T>
constexpr std::int64_t NR = 2 * width<T>;

// A block [mc x kc] packed into strips of MR rows: for each k, MR consecutive values.
template <class T>
void pack_a(std::int64_t mc, std::int64_t kc, const T* a, std::int64_t rs, std::int64_t cs, T* out)
{
    for (std::int64_t i0 = 0; i0 < mc; i0 += MR) {
        const std::int64_t mr = std::min(MR, mc - i0);
        for (std::int64_t p = 0; p < kc; ++p) {
            std::int64_t i = 0;
            for (; i < mr; ++i) out[i] = a[(i0 + i) * rs + p * cs];
            for (; i < MR; ++i) out[i] = T(0);
            out += MR;
        }
    }
}

// B block [kc x nc] packed into strips of NR columns: for each k, NR consecutive values.
template <class T>
void pack_b(std::int64_t kc, std::int64_t nc, const T* b, std::int64_t rs, std::int64_t cs, T* out)
{
    constexpr std::int64_t nr_full = NR<T>;
    for (std::int64_t j0 = 0; j0 < nc; j0 += nr_full) {
        const std::int64_t nr = std::min(nr_full, nc - j0);
        if (cs == 1 && nr == nr_full) {
            for (std::int64_t p = 0; p < kc; ++p) {
                std::memcpy(out, b + p * rs + j0, sizeof(T) * nr_full);
                out += nr_full;
            }
        } else {
            for (std::int64_t p = 0; p < kc; ++p) {
                std::int64_t j = 0;
                for (; j < nr; ++j) out[j] = b[p * rs + (j0 + j) * cs];
                for (; j < nr_full; ++j) out[j] = T(0);
                out += nr_full;
            }
        }
    }
}

// C[mr x nr] (+)= packed A strip * packed B strip, with MR x NR accumulators in registers.
template <class T>
void micro_kernel(std::int64_t kc, const T* a, const T* b, T* c, std::int64_t ldc, bool acc, std::int64_t mr,
                  std::int64_t nr)
{
    using V = typename vec_of<T>::type;
    constexpr std::int64_t W = width<T>;
    V c00{}, c01{}, c10{}, c11{}, c20{}, c21{}, c30{}, c31{}, c40{}, c41{}, c50{}, c51{};
    for (std::int64_t p = 0; p < kc; ++p) {
        V b0, b1;
        std::memcpy(&b0, b, sizeof(V));
        std::memcpy(&b1, b + W, sizeof(V));
        V av;
        av = V{} + a[0]; c00 += av * b0; c01 += av * b1;
        av = V{} + a[1]; c10 += av * b0; c11 += av * b1;
        av = V{} + a[2]; c20 += av * b0; c21 += av * b1;
        av = V{} + a[3]; c30 += av * b0; c31 += av * b1;
        av = V{} + a[4]; c40 += av * b0; c41 += av * b1;
        av = V{} + a[5]; c50 += av * b0; c51 += av * b1;
        a += MR;
        b += 2 * W;
    }
    alignas(32) T tile[MR][2 * W];
    const V* rows[MR][2] = {{&c00, &c01}, {&c10, &c11}, {&c20, &c21},
                            {&c30, &c31}, {&c40, &c41}, {&c50, &c51}};
    if (mr == MR && nr == 2 * W) {
        for (std::int64_t i = 0; i < MR; ++i) {
            T* ci = c + i * ldc;
            if (acc) {
                V x0, x1;
                std::memcpy(&x0, ci, sizeof(V));
                std::memcpy(&x1, ci + W, sizeof(V));
                x0 += *rows[i][0];
                x1 += *rows[i][1];
                std::memcpy(ci, &x0, sizeof(V));
                std::memcpy(ci + W, &x1, sizeof(V));
            } else {
                std::memcpy(ci, rows[i][0], sizeof(V));
                std::memcpy(ci + W, rows[i][1], sizeof(V));
            }
        }
        return;
    }
    for (std::int64_t i = 0; i < MR; ++i) {
        std::memcpy(&tile[i][0], rows[i][0], sizeof(V));
        std::memcpy(&tile[i][W], rows[i][1], sizeof(V));
    }
    for (std::int64_t i = 0; i < mr; ++i)
        for (std::int64_t j = 0; j < nr; ++j) c[i * ldc + j] = acc ? c[i * ldc + j] + tile[i][j] : tile[i][j];
}

template <class T>
struct buffers {
    std::vector<T> a, b;
};

template <class T>
buffers<T>& scratch()
{
    thread_local buffers<T> buf;
    return buf;
}

} // namespace

template <class T>
void gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
          bool accumulate)
{
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {
        if (!accumulate)
            for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, T(0));
        return;
    }
    constexpr std::int64_t nr_full = NR<T>;
    auto& buf = scratch<T>();
    const std::int64_t nc_max = std::min(NC, (n + nr_full - 1) / nr_full * nr_full);
    const std::int64_t mc_max = std::min(MC, (m + MR - 1) / MR * MR);
    buf.a.resize(static_cast<std::size_t>(mc_max * std::min(KC, k)));
    buf.b.resize(static_cast<std::size_t>(nc_max * std::min(KC, k)));
    for (std::int64_t j0 = 0; j0 < n; j0 += NC) {
        const std::int64_t nc = std::min(NC, n - j0);
        for (std::int64_t p0 = 0; p0 < k; p0 += KC) {
            const std::int64_t kc = std::min(KC, k - p0);
            const bool acc = accumulate || p0 > 0;
            pack_b(kc, nc, b.data + p0 * b.rs + j0 * b.cs, b.rs, b.cs, buf.b.data());
            for (std::int64_t i0 = 0; i0 < m; i0 += MC) {
                const std::int64_t mc = std::min(MC, m - i0);
                pack_a(mc, kc, a.data + i0 * a.rs + p0 * a.cs, a.rs, a.cs, buf.a.data());
                for (std::int64_t jr = 0; jr < nc; jr += nr_full) {
                    const T* pb = buf.b.data() + jr * kc;
                    for (std::int64_t ir = 0; ir < mc; ir += MR) {
                        micro_kernel<T>(kc, buf.a.data() + ir * kc, pb, c + (i0 + ir) * ldc + j0 + jr, ldc, acc,
                                        std::min(MR, mc - ir), std::min(nr_full, nc - jr));
                    }
                }
            }
        }
    }
}

template <class T>
void gemm(thread_pool& pool, std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c,
          std::int64_t ldc, bool accumulate)
{
    const int threads = pool.size();
    const double flops = double(m) * double(n) * double(k);
    if (threads == 1 || flops < 64.0 * 1024) {
        gemm(m, n, k, a, b, c, ldc, accumulate);
        return;
    }
    if (m >= 16 * MR * threads || n < 2 * NR<T>) {
        // Split rows of C into chunks (multiples of MR).
        const std::int64_t parts = std::min<std::int64_t>(threads, (m + MR - 1) / MR);
        const std::int64_t chunk = ((m + parts - 1) / parts + MR - 1) / MR * MR;
        pool.run(static_cast<int>(parts), [&](int t) {
            const std::int64_t i0 = t * chunk, i1 = std::min(m, i0 + chunk);
            if (i0 < i1) gemm(i1 - i0, n, k, mat<T>{a.data + i0 * a.rs, a.rs, a.cs}, b, c + i0 * ldc, ldc, accumulate);
        });
    } else {
        constexpr std::int64_t nr = NR<T>;
        const std::int64_t parts = std::min<std::int64_t>(threads, (n + nr - 1) / nr);
        const std::int64_t chunk = ((n + parts - 1) / parts + nr - 1) / nr * nr;
        pool.run(static_cast<int>(parts), [&](int t) {
            const std::int64_t j0 = t * chunk, j1 = std::min(n, j0 + chunk);
            if (j0 < j1) gemm(m, j1 - j0, k, a, mat<T>{b.data + j0 * b.cs, b.rs, b.cs}, c + j0, ldc, accumulate);
        });
    }
}

template <class T>
void gemm_naive(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
                bool accumulate)
{
    for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
            T s = accumulate ? c[i * ldc + j] : T(0);
            for (std::int64_t p = 0; p < k; ++p) s += a.data[i * a.rs + p * a.cs] * b.data[p * b.rs + j * b.cs];
            c[i * ldc + j] = s;
        }
}

#define GPT_INSTANTIATE(T)                                                                                   \
    template void gemm<T>(std::int64_t, std::int64_t, std::int64_t, mat<T>, mat<T>, T*, std::int64_t, bool); \
    template void gemm<T>(thread_pool&, std::int64_t, std::int64_t, std::int64_t, mat<T>, mat<T>, T*,        \
                          std::int64_t, bool);                                                               \
    template void gemm_naive<T>(std::int64_t, std::int64_t, std::int64_t, mat<T>, mat<T>, T*, std::int64_t, bool);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
#undef GPT_INSTANTIATE

} // namespace gpt
