#pragma once
// TPIPE_HOST_DEVICE marks a function nvcc compiles for the host and the device; g++ sees an
// empty macro. TPIPE_HD_TEMPLATE goes before a host-device template whose instantiations call
// device-only members of its executor (CUB reductions): without it nvcc warns about a host path
// that no instantiation takes.
#if defined(__CUDACC__)
#define TPIPE_HOST_DEVICE __host__ __device__
#define TPIPE_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define TPIPE_HOST_DEVICE
#define TPIPE_HD_TEMPLATE
#endif

namespace gpt::cuda {

//! *p += v; atomically on the device, where threads of a scatter may meet on one address.
TPIPE_HOST_DEVICE inline void accumulate(float* p, float v)
{
#if defined(__CUDA_ARCH__)
    atomicAdd(p, v);
#else
    *p += v;
#endif
}
TPIPE_HOST_DEVICE inline void accumulate(double* p, double v)
{
#if defined(__CUDA_ARCH__)
    atomicAdd(p, v);
#else
    *p += v;
#endif
}

} // namespace gpt::cuda
