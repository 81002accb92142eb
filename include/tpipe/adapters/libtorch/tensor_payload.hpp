#pragma once
// A torch::Tensor crossing processes (tpipe::mpi::transport): dtype and shape as the header, the
// contiguous bytes as the body. Part of tpipe/adapters/libtorch.hpp.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include <torch/nn.h>

#include "tpipe/core/error.hpp"
#include "tpipe/transport/payload_traits.hpp"
#include "tpipe/adapters/libtorch/tensor_spec.hpp"

//! A tensor crossing processes: dtype and shape as the header, the contiguous bytes as the body
//! (CPU tensors; the stage sends its outputs contiguous). Refuses a tensor with more dimensions
//! than the header holds.
template <>
struct tpipe::payload_traits<torch::Tensor> {
    static constexpr int max_dims = 8;
    struct header {
        std::int32_t dtype;  //!< c10::ScalarType
        std::int32_t ndim;   //!< -1: an undefined tensor (e.g. the gradient of token ids)
        std::int64_t sizes[max_dims];
    };
    static header header_of(const torch::Tensor& t)
    {
        header h{};
        if (!t.defined()) {
            h.ndim = -1;
            return h;
        }
        if (t.dim() > max_dims)
            throw tpipe::invalid_argument("payload_traits<torch::Tensor>: a tensor of shape " +
                                          tpipe::libtorch::describe(t) + " has " + std::to_string(t.dim()) +
                                          " dimensions; a payload carries at most " + std::to_string(max_dims) +
                                          " (reshape it before sending)");
        h.dtype = static_cast<std::int32_t>(t.scalar_type());
        h.ndim = static_cast<std::int32_t>(t.dim());
        for (int i = 0; i < h.ndim; ++i) h.sizes[i] = t.size(i);
        return h;
    }
    static torch::Tensor make(const header& h)
    {
        if (h.ndim < 0) return {};
        if (h.ndim > max_dims)
            throw tpipe::invalid_argument("payload_traits<torch::Tensor>: a header with " + std::to_string(h.ndim) +
                                          " dimensions; at most " + std::to_string(max_dims));
        return torch::empty(c10::IntArrayRef(h.sizes, static_cast<std::size_t>(h.ndim)),
                            torch::TensorOptions().dtype(static_cast<c10::ScalarType>(h.dtype)));
    }
    static std::span<const std::byte> bytes(const torch::Tensor& t) { return body(t); }
    static std::span<std::byte> bytes(torch::Tensor& t) { return body(t); }

private:
    static std::span<std::byte> body(const torch::Tensor& t)
    {
        if (!t.defined()) return {};
        if (!t.is_contiguous() || !t.device().is_cpu())
            throw tpipe::invalid_argument("payload_traits<torch::Tensor>: a " + tpipe::libtorch::describe(t) +
                                          " tensor that is not a contiguous CPU tensor; send t.contiguous() (on "
                                          "the CPU)");
        return {static_cast<std::byte*>(t.data_ptr()), t.nbytes()};
    }
};
static_assert(tpipe::byte_payload<torch::Tensor>);
