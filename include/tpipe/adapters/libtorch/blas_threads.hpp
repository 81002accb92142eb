#pragma once
// OpenBLAS's own thread pool under pipeline stages. Debian's libtorch does its matrix products in
// OpenBLAS, which keeps a pool of one thread per core besides libtorch's intra-op threads
// (torch::set_num_threads does not reach it): two stage threads each waking a full pool on two
// cores ran the threaded pipeline ~8x slower than plain libtorch (docs/libtorch.md, "BLAS
// threads"). A module_stage therefore limits the pool to one thread when the first stage starts
// running, unless the user chose with OPENBLAS_NUM_THREADS. Part of tpipe/adapters/libtorch.hpp.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace tpipe::libtorch {

//! What limit_openblas_threads found and did.
struct openblas_threads {
    bool present = false;  //!< the process has OpenBLAS (openblas_set_num_threads resolves)
    bool user_set = false; //!< OPENBLAS_NUM_THREADS is set: left as the user chose
    int before = 0;        //!< threads of the pool before (0: unknown)
    int after = 0;         //!< threads of the pool after (0: unknown)
};

//! Sets OpenBLAS's pool to `threads` threads, unless OPENBLAS_NUM_THREADS is set (then the
//! user's choice stands). Nothing happens in a process without OpenBLAS (e.g. libtorch on MKL).
inline openblas_threads limit_openblas_threads(int threads = 1)
{
    openblas_threads r;
    using set_fn = void (*)(int);
    using get_fn = int (*)();
    set_fn set = nullptr;
    get_fn get = nullptr;
    void* s = dlsym(RTLD_DEFAULT, "openblas_set_num_threads");  // object to function pointer: by copy
    void* g = dlsym(RTLD_DEFAULT, "openblas_get_num_threads");
    std::memcpy(&set, &s, sizeof set);
    std::memcpy(&get, &g, sizeof get);
    r.present = set != nullptr;
    r.user_set = std::getenv("OPENBLAS_NUM_THREADS") != nullptr;
    if (get) r.before = r.after = get();
    if (!r.present || r.user_set) return r;
    set(threads);
    if (get) r.after = get();
    return r;
}

namespace detail {
//! Once per process, from the first stage that runs.
inline void limit_blas_threads_once()
{
    static std::once_flag once;
    std::call_once(once, [] { limit_openblas_threads(1); });
}
} // namespace detail

} // namespace tpipe::libtorch
