#include "gpt_cuda/model.hpp"

#include <tpipe/cuda/current.hpp>
#include <tpipe/cuda/error_macros.hpp>

namespace gpt::cuda {

device_backend::device_backend(place p, cudaStream_t stream) : place_(p)
{
    if (!p.pool) throw tpipe::invalid_argument("gpt::cuda::device_backend: no memory pool given");
    set_stream(stream);
}

cudaStream_t device_backend::current_stream() { return tpipe::cuda::current_stream(); }

void device_backend::set_stream(cudaStream_t stream)
{
    ex_.stream = stream;
    blas_.bind(stream);
}

device_buffer device_backend::alloc(std::size_t bytes) { return place_.pool->allocate(bytes, place_.gpu, ex_.stream); }

void device_backend::zero(buffer& b) { TPIPE_CUDA_TRY(cudaMemsetAsync(b.data(), 0, b.bytes(), ex_.stream)); }

void device_backend::copy(const buffer& from, buffer& to)
{
    TPIPE_CUDA_TRY(cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToDevice, ex_.stream));
}

void device_backend::upload(buffer& to, const void* from, std::size_t bytes)
{
    TPIPE_CUDA_TRY(cudaMemcpyAsync(to.data(), from, bytes, cudaMemcpyHostToDevice, ex_.stream));
    sync();
}

void device_backend::download(void* to, const buffer& from, std::size_t bytes)
{
    TPIPE_CUDA_TRY(cudaMemcpyAsync(to, from.data(), bytes, cudaMemcpyDeviceToHost, ex_.stream));
    sync();
}

void device_backend::sync() { TPIPE_CUDA_TRY(cudaStreamSynchronize(ex_.stream)); }

void device_backend::received(buffer& b)
{
    if (b && b.stream() != ex_.stream) b.use_on(ex_.stream);
}

template class basic_parameters<device_backend>;
template class basic_part<device_backend>;
template class basic_part<device_backend, bf16>;
template class basic_adamw<device_backend>;
template double full_step<float, device_backend>(parameters&, const gpt::batch&, cudaStream_t);
template double full_step<bf16, device_backend>(parameters&, const gpt::batch&, cudaStream_t);
template double run_in_order<device_backend, float>(const std::vector<part*>&, const tpipe::scheme&, const gpt::batch&);
template double run_in_order<device_backend, bf16>(const std::vector<part_bf16*>&, const tpipe::scheme&,
                                                   const gpt::batch&);

} // namespace gpt::cuda
