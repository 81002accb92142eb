#pragma once
// What training.cpp (plain and pipelined runs) and elastic.cpp (--elastic) share: the model's
// shape from the options and its parameters as one vector.
#include <vector>

#include <torch/torch.h>

#include <tpipe/core/error.hpp>

#include "gpt.hpp"
#include "training.hpp"

namespace libtorch_gpt {

inline config config_of(const options& o)
{
    if (o.d_model % o.heads != 0)
        throw tpipe::invalid_argument("--heads " + std::to_string(o.heads) + " must divide --d-model " +
                                      std::to_string(o.d_model));
    return {.vocab = 256, .seq_len = o.seq_len, .d_model = o.d_model, .heads = o.heads, .layers = o.layers};
}

//! `tensors` flattened one after another, as doubles.
inline std::vector<double> flatten(const std::vector<torch::Tensor>& tensors)
{
    std::vector<double> out;
    for (const auto& p : tensors) {
        auto d = p.detach().to(torch::kDouble).contiguous();
        out.insert(out.end(), d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
    }
    return out;
}

//! Every parameter of `m`, flattened in model order, as doubles.
inline std::vector<double> flatten(const torch::nn::Module& m) { return flatten(m.parameters()); }

} // namespace libtorch_gpt
