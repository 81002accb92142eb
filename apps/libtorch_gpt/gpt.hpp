#pragma once
// A small GPT in ordinary libtorch style: modules with forward(Tensor) -> Tensor chained in a
// torch::nn::Sequential. Two lines are tpipe's: the token embedding asks at which position the
// current token slice starts, and attention keeps the keys and values of earlier slices in a
// tpipe::libtorch::kv_cache. Outside a pipeline both are no-ops (a whole sequence, no cache).
// Its linear layers and token embedding are Megatron's tensor-parallel ones
// (tpipe/adapters/libtorch/tensor_parallel.hpp): over a tensor group of t ranks each holds
// heads/t heads, 4 d_model/t MLP features and vocab/t vocabulary rows; with the default group of
// one they are torch::nn::Linear and torch::nn::Embedding, bit for bit.
#include <cmath>
#include <cstdint>
#include <functional>

#include <torch/torch.h>

#include <tpipe/adapters/libtorch.hpp>
#include <tpipe/adapters/libtorch/tensor_parallel.hpp>

namespace libtorch_gpt {

namespace tp = tpipe::libtorch;

struct config {
    std::int64_t vocab = 256;  // byte-level tokens
    std::int64_t seq_len = 64;
    std::int64_t d_model = 64;
    std::int64_t heads = 4;
    std::int64_t layers = 4;
};

// [snippet:model]
//! Token and position embeddings: [rows, tokens] ids -> [rows, tokens, d_model].
struct EmbeddingsImpl : torch::nn::Module {
    tp::VocabParallelEmbedding token{nullptr};
    torch::nn::Embedding position{nullptr};
    EmbeddingsImpl(const config& c, const tp::tensor_group& g)
        : token(register_module("token", tp::VocabParallelEmbedding(c.vocab, c.d_model, g))),
          position(register_module("position", torch::nn::Embedding(c.seq_len, c.d_model)))
    {
    }
    torch::Tensor forward(torch::Tensor ids)
    {
        const std::int64_t t0 = tpipe::libtorch::context_tokens();  // where this token slice starts
        return token(ids) + position(torch::arange(t0, t0 + ids.size(1), ids.options()));
    }
};
TORCH_MODULE(Embeddings);

//! Causal self-attention; across token slices, earlier slices' keys and values come from the cache.
struct AttentionImpl : torch::nn::Module {
    std::int64_t heads, head_width;  // this rank's heads (of c.heads)
    tp::ColumnParallelLinear qkv{nullptr};  // the q, k and v of this rank's heads
    tp::RowParallelLinear out{nullptr};
    tpipe::libtorch::kv_cache cache;
    AttentionImpl(const config& c, const tp::tensor_group& g)
        : heads(g.share_of(c.heads, "--heads")), head_width(c.d_model / c.heads),
          qkv(register_module("qkv", tp::ColumnParallelLinear(c.d_model, 3 * c.d_model, g, tp::ColumnParallelLinearOptions{.blocks = 3}))),
          out(register_module("out", tp::RowParallelLinear(c.d_model, c.d_model, g)))
    {
    }
    torch::Tensor forward(torch::Tensor x)
    {
        const std::int64_t rows = x.size(0), tokens = x.size(1), d = heads * head_width;
        auto split = qkv(x).view({rows, tokens, 3, heads, head_width}).permute({2, 0, 3, 1, 4});  // 3 x [r, h, t, dh]
        auto [k, v] = cache.extend(split[1], split[2]);  // keys/values of tokens [0, end of slice)
        const std::int64_t context = k.size(2) - tokens;
        auto scores = torch::matmul(split[0], k.transpose(-2, -1)) / std::sqrt(static_cast<double>(head_width));
        auto allowed = torch::ones({tokens, context + tokens}, x.options().dtype(torch::kBool)).tril(context);
        auto y = torch::matmul(torch::softmax(scores.masked_fill(allowed.logical_not(), -INFINITY), -1), v);
        return out(y.permute({0, 2, 1, 3}).reshape({rows, tokens, d}));
    }
};
TORCH_MODULE(Attention);

//! Pre-norm transformer block.
struct BlockImpl : torch::nn::Module {
    torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
    Attention attention{nullptr};
    torch::nn::Sequential mlp{nullptr};
    BlockImpl(const config& c, const tp::tensor_group& g)
        : ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
          ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
          attention(register_module("attention", Attention(c, g))),
          mlp(register_module("mlp", torch::nn::Sequential(tp::ColumnParallelLinear(c.d_model, 4 * c.d_model, g),
                                                           torch::nn::GELU(),
                                                           tp::RowParallelLinear(4 * c.d_model, c.d_model, g))))
    {
    }
    torch::Tensor forward(torch::Tensor x)
    {
        x = x + attention(ln1(x));
        return x + mlp->forward(ln2(x));
    }
};
TORCH_MODULE(Block);

//! Final norm and the language-model head: [rows, tokens, d_model] -> logits [rows, tokens, vocab]
//! (over t tensor ranks, this rank's vocab/t of them: tp::vocab_parallel_cross_entropy takes those).
struct HeadImpl : torch::nn::Module {
    torch::nn::LayerNorm ln{nullptr};
    tp::ColumnParallelLinear logits{nullptr};
    HeadImpl(const config& c, const tp::tensor_group& g)
        : ln(register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})))),
          logits(register_module("logits", tp::ColumnParallelLinear(c.d_model, c.vocab, g, tp::ColumnParallelLinearOptions{.bias = false})))
    {
    }
    torch::Tensor forward(torch::Tensor x) { return logits(ln(x)); }
};
TORCH_MODULE(Head);

//! The model: embeddings, `layers` blocks, head. Module m draws its initial weights from
//! `seed` and m alone, so a process that builds only the modules of its stages (`builds(m)`;
//! the others are parameterless placeholders) holds the weights a whole model would have there.
//! Split over tensor groups (`tensor_of(m)`: the group of module m's stage), each rank holds its
//! shares of those weights.
inline torch::nn::Sequential make_gpt(const config& c, std::uint64_t seed = 1,
                                      const std::function<bool(std::size_t)>& builds = {},
                                      const std::function<tp::tensor_group(std::size_t)>& tensor_of = {})
{
    torch::nn::Sequential model;
    const auto modules = static_cast<std::size_t>(c.layers) + 2;
    for (std::size_t m = 0; m < modules; ++m) {
        if (builds && !builds(m)) {
            model->push_back(torch::nn::Identity());
            continue;
        }
        torch::manual_seed(seed * 1000003 + m);
        const tp::tensor_group tensor = tensor_of ? tensor_of(m) : tp::tensor_group{};
        if (m == 0) model->push_back(Embeddings(c, tensor));
        else if (m + 1 == modules) model->push_back(Head(c, tensor));
        else model->push_back(Block(c, tensor));
    }
    return model;
}
// [/snippet]

} // namespace libtorch_gpt
