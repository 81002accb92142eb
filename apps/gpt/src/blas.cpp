// gemm on OpenBLAS: each call is single-threaded on its caller, and the GPT's own pool splits a
// large GEMM into blocks of C, so a part with T threads uses exactly T cores even when every
// pipeline stage multiplies at the same time.
#include "gpt/kernels.hpp"

#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <type_traits>
#include <string>

// OpenBLAS's runtime kernel selection (DYNAMIC_ARCH builds); weak, so another BLAS build links.
extern "C" void gotoblas_dynamic_init(void) __attribute__((weak));
extern "C" void gotoblas_dynamic_quit(void) __attribute__((weak));

namespace gpt {
namespace {

bool cpu_has_avx512()
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512cd");
#else
    return false;
#endif
}

bool cpu_has_avx2()
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return false;
#endif
}

// The kernel set this CPU's instructions allow, when OpenBLAS detected a weaker one ("" when its
// choice is already as wide). OpenBLAS 0.3.21 (Debian 12) names a core by its model number, so a
// core newer than the release falls back: AMD's AVX-512 cores after Zen 3 get the AVX2 (Zen)
// kernels, Intel's Emerald Rapids (family 6, model 207) the SSE3 (Prescott) ones, at 1/4 of the
// speed. The choice here goes by the instructions instead, as later releases do for known cores.
std::string wider_core(const std::string& found)
{
    const auto any_of = [&](std::initializer_list<const char*> names) {
        for (const char* n : names)
            if (found == n) return true;
        return false;
    };
    const bool avx512_set = any_of({"SkylakeX", "Cooperlake", "SapphireRapids"});
    if (cpu_has_avx512() && !avx512_set) return "SkylakeX";
    if (cpu_has_avx2() && !avx512_set && !any_of({"Haswell", "Zen"})) return "Haswell";
    return "";
}

// Runs once, before the first GEMM of the process.
//  - OpenBLAS's own threads stay idle: every call runs on its caller (the pool splits the work).
//  - A kernel set narrower than the CPU's instructions (see wider_core) is replaced, unless the
//    user chose one with OPENBLAS_CORETYPE.
struct openblas_setup {
    std::string core;
    openblas_setup()
    {
        if (openblas_get_parallel() == 0)
            throw std::runtime_error("gpt: this OpenBLAS is the single-threaded build, which is not safe for "
                                     "concurrent callers; link the pthread build (libopenblas-pthread-dev)");
        const std::string wider = wider_core(openblas_get_corename());
        // A user's own OPENBLAS_CORETYPE is their choice: never overridden.
        if (!wider.empty() && std::getenv("OPENBLAS_CORETYPE") == nullptr && gotoblas_dynamic_init && gotoblas_dynamic_quit) {
            setenv("OPENBLAS_CORETYPE", wider.c_str(), 1);
            gotoblas_dynamic_quit();
            gotoblas_dynamic_init();
        }
        openblas_set_num_threads(1);
        core = openblas_get_corename();
    }
};

const openblas_setup& setup()
{
    static const openblas_setup s;
    return s;
}

// A strided view as a BLAS operand: one of its strides must be 1.
template <class T>
bool as_blas(mat<T> a, std::int64_t rows, std::int64_t cols, CBLAS_TRANSPOSE& op, int& ld)
{
    if (a.cs == 1 && (a.rs >= cols || rows == 1)) {
        op = CblasNoTrans;
        ld = static_cast<int>(std::max<std::int64_t>(a.rs, std::max<std::int64_t>(cols, 1)));
        return true;
    }
    if (a.rs == 1 && (a.cs >= rows || cols == 1)) {
        op = CblasTrans;
        ld = static_cast<int>(std::max<std::int64_t>(a.cs, std::max<std::int64_t>(rows, 1)));
        return true;
    }
    return false;
}

template <class T>
void blas_gemm(std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c, std::int64_t ldc,
               bool accumulate)
{
    CBLAS_TRANSPOSE ta, tb;
    int lda, ldb;
    if (!as_blas(a, m, k, ta, lda) || !as_blas(b, k, n, tb, ldb))
        throw std::invalid_argument("gpt::gemm: operands need a unit row or column stride (got A strides " +
                                    std::to_string(a.rs) + "," + std::to_string(a.cs) + " and B strides " +
                                    std::to_string(b.rs) + "," + std::to_string(b.cs) + ")");
    const T beta = accumulate ? T(1) : T(0);
    if constexpr (std::is_same_v<T, float>)
        cblas_sgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0f, a.data, lda, b.data, ldb, beta, c, int(ldc));
    else
        cblas_dgemm(CblasRowMajor, ta, tb, int(m), int(n), int(k), 1.0, a.data, lda, b.data, ldb, beta, c, int(ldc));
}

} // namespace

const std::string& blas_core() { return setup().core; }

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
    setup();
    blas_gemm(m, n, k, a, b, c, ldc, accumulate);
}

template <class T>
void gemm(thread_pool& pool, std::int64_t m, std::int64_t n, std::int64_t k, mat<T> a, mat<T> b, T* c,
          std::int64_t ldc, bool accumulate)
{
    // Below this a split costs more in wake-ups than it saves.
    if (double(m) * double(n) * double(k) < 128.0 * 1024) {
        gemm(m, n, k, a, b, c, ldc, accumulate);
        return;
    }
    // Blocks of C rows (of columns when C is short and wide) chosen from the shape alone, never
    // from the pool's size: some OpenBLAS kernel sets (Haswell's, for one) give bits that depend on
    // the block a call is given, so a stage's results stay the same on 1 or T threads. Up to four
    // blocks (enough for the stages' few threads; fewer calls keep OpenBLAS's packing cheap), each
    // a multiple of 16 (the micro-kernels' tiles) and at least 64.
    const bool by_rows = m >= n;
    const std::int64_t extent = by_rows ? m : n;
    const std::int64_t block = std::max<std::int64_t>(64, ((extent + 3) / 4 + 15) / 16 * 16);
    const std::int64_t blocks = (extent + block - 1) / block;
    pool.run(static_cast<int>(blocks), [&](int t) {
        const std::int64_t lo = t * block, hi = std::min(extent, lo + block);
        if (by_rows)
            gemm(hi - lo, n, k, mat<T>{a.data + lo * a.rs, a.rs, a.cs}, b, c + lo * ldc, ldc, accumulate);
        else
            gemm(m, hi - lo, k, a, mat<T>{b.data + lo * b.cs, b.rs, b.cs}, c + lo, ldc, accumulate);
    });
}

#define GPT_INSTANTIATE(T)                                                                                   \
    template void gemm<T>(std::int64_t, std::int64_t, std::int64_t, mat<T>, mat<T>, T*, std::int64_t, bool); \
    template void gemm<T>(thread_pool&, std::int64_t, std::int64_t, std::int64_t, mat<T>, mat<T>, T*,        \
                          std::int64_t, bool);
GPT_INSTANTIATE(float)
GPT_INSTANTIATE(double)
#undef GPT_INSTANTIATE

} // namespace gpt
