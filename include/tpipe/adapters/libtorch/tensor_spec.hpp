#pragma once
// What a libtorch stage takes (tensor_spec), inferred from its first module where it says so;
// describe() writes a tensor's shape and dtype for errors. Part of tpipe/adapters/libtorch.hpp.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn.h>

namespace tpipe::libtorch {

//! "[2, 16, 64] Float" (or "undefined").
inline std::string describe(const torch::Tensor& t)
{
    if (!t.defined()) return "undefined";
    std::string s = "[";
    for (std::int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "] " + std::string(c10::toString(t.scalar_type()));
}

//! What a stage takes: the trailing sizes of its input (rows and tokens vary per unit, so only
//! the feature dimensions are fixed) and whether it is integral (token ids) or floating point.
struct tensor_spec {
    enum class kind { any, floating, integral };
    std::vector<std::int64_t> trailing;  //!< sizes of the last dimensions; empty: any shape
    kind type = kind::any;

    static tensor_spec features(std::vector<std::int64_t> sizes) { return {std::move(sizes), kind::floating}; }
    static tensor_spec token_ids() { return {{}, kind::integral}; }

    bool accepts(const torch::Tensor& t) const
    {
        if (type == kind::floating && !t.is_floating_point()) return false;
        if (type == kind::integral && (t.is_floating_point() || t.is_complex())) return false;
        const auto n = static_cast<std::int64_t>(trailing.size());
        if (t.dim() < n) return false;
        for (std::int64_t i = 0; i < n; ++i)
            if (t.size(t.dim() - n + i) != trailing[static_cast<std::size_t>(i)]) return false;
        return true;
    }
    std::string text() const
    {
        std::string s = "[...";
        for (auto d : trailing) s += ", " + std::to_string(d);
        s += "]";
        return s + (type == kind::floating ? " floating point" : type == kind::integral ? " integral" : "");
    }
};

//! What the first module of a range takes, when it says so itself (Linear: in_features,
//! LayerNorm: normalized_shape, Embedding: token ids); searched depth first so that a user
//! module that starts with one of them (a block starting with its LayerNorm) is covered. The
//! search follows registration order, which is a module's call order in ordinary libtorch code;
//! pass a tensor_spec to cut() where it is not.
inline tensor_spec infer_input(const torch::nn::Module& first)
{
    for (const auto& m : first.modules(/*include_self=*/true)) {
        if (auto* l = m->as<torch::nn::Linear>()) return tensor_spec::features({l->options.in_features()});
        if (auto* n = m->as<torch::nn::LayerNorm>()) return tensor_spec::features(n->options.normalized_shape());
        if (m->as<torch::nn::Embedding>()) return tensor_spec::token_ids();
    }
    return {};
}

} // namespace tpipe::libtorch
