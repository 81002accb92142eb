#pragma once
// Megatron's tensor parallelism for torch::nn models inside tpipe stages. Each of a stage's t
// tensor ranks holds a share of every split layer and sums partial results over its tensor
// group; a torch::nn model becomes tensor-parallel by swapping four kinds of layer:
//
//   tpipe::blocking_group<tpipe::mpi::communicator> sums(job.tensor());
//   tpipe::libtorch::tensor_group tp(sums);                                 // this rank, of t
//   ColumnParallelLinear qkv(d, 3 * d, tp, ColumnParallelLinearOptions{.blocks = 3});  // heads/t heads
//   RowParallelLinear out(d, d, tp);                                        // sums over the group
//   VocabParallelEmbedding tokens(vocab, d, tp);                            // vocab/t rows
//   auto loss = vocab_parallel_cross_entropy(logits_share, targets, tp);   // logits never gathered
//
// The split (Megatron-LM's):
// - a column-parallel linear holds out/t of the output features (with blocks > 1, out/t of each
//   of `blocks` equal blocks: the q, k and v of heads/t heads); its input is replicated, and its
//   backward sums the input's gradient over the group;
// - a row-parallel linear holds in/t of the input features (the columns a column-parallel layer
//   before it produced), sums its partial products over the group in the forward (one sum; its
//   backward has none) and adds its whole bias after the sum;
// - a vocabulary-parallel embedding holds vocab/t rows: ids outside them look up zeros, and the
//   group's sum is the lookup;
// - vocab_parallel_cross_entropy takes the logits of this rank's vocabulary rows (a
//   column-parallel head) and sums three things over the group: each rank's row maxima (an exact
//   gather), the exponentials' sums and the target's logit. The full logits are never gathered.
//
// Initial weights: every rank draws the whole layer's weights as its torch::nn counterpart does
// and keeps its share (Megatron's CPU initialisation), so with the same seed a model at t ranks
// starts from the shares of the model at one rank. At t = 1 every layer is its torch::nn
// counterpart bit for bit: the same draws, the same kernels, no sum.
//
// Exactness: every sum is the communicator's, with the same bits on every rank, so the
// parameters that every rank holds whole (LayerNorms, row-parallel biases, position embeddings)
// get the same gradient everywhere and stay equal. Against t = 1, a split product or softmax is
// summed in another order: equal within float32 rounding, not bit for bit.
//
// Every rank of a group must run the same layers in the same order (the sums are collectives);
// autograd's backward on the CPU runs a graph's nodes in one fixed order, so backwards agree too.
// whole_parameters(module, group) gathers a module's parameters whole, on every rank.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "tpipe/adapters/libtorch/tensor_spec.hpp"
#include "tpipe/comm/blocking_group.hpp"
#include "tpipe/core/error.hpp"

namespace tpipe::libtorch {

//! The tensor group of a stage, as its layers see it: this rank, the group's size, and a sum of
//! float32 tensors over the group that blocks until it is done. Default: a group of one.
class tensor_group {
public:
    tensor_group() = default;
    template <class Comm>
    explicit tensor_group(blocking_group<Comm>& g)
        : rank_(g.rank()), size_(g.size()),
          sum_(std::make_shared<std::function<void(std::span<float>)>>([&g](std::span<float> v) { g.all_reduce_sum(v); }))
    {
    }
    //! A group over any blocking float sum (the members' sums must give the same bits everywhere).
    tensor_group(int rank, int size, std::function<void(std::span<float>)> sum)
        : rank_(rank), size_(size), sum_(std::make_shared<std::function<void(std::span<float>)>>(std::move(sum)))
    {
        if (size < 1 || rank < 0 || rank >= size)
            throw invalid_argument("tensor_group: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                                   " ranks (need 0 <= rank < size)");
    }

    int rank() const noexcept { return rank_; }
    int size() const noexcept { return size_; }

    //! The sum of `t` (float32) over the group, as a new contiguous tensor of its shape.
    torch::Tensor sum(const torch::Tensor& t) const
    {
        if (t.scalar_type() != torch::kFloat)
            throw invalid_argument("tensor_group::sum: sums float32 tensors, got " + describe(t));
        torch::Tensor out = t.contiguous().clone();
        if (size_ > 1) (*sum_)(std::span<float>(out.data_ptr<float>(), static_cast<std::size_t>(out.numel())));
        return out;
    }

    //! n / size(): the count this rank holds of n things split evenly; refused unless it divides.
    std::int64_t share_of(std::int64_t n, const std::string& what) const
    {
        if (n % size_ != 0)
            throw invalid_argument("tensor parallelism over " + std::to_string(size_) + " ranks: " + what + " (" +
                                   std::to_string(n) + ") is not divisible by " + std::to_string(size_) +
                                   "; use a tensor size that divides it");
        return n / size_;
    }

private:
    int rank_ = 0, size_ = 1;
    std::shared_ptr<std::function<void(std::span<float>)>> sum_;
};

namespace detail {

inline std::int64_t group_address(const tensor_group& g) { return reinterpret_cast<std::intptr_t>(&g); }
inline const tensor_group& group_at(const torch::autograd::AutogradContext* ctx)
{
    // The layer that made the graph holds its group and outlives the graph's backward.
    return *reinterpret_cast<const tensor_group*>(static_cast<std::intptr_t>(ctx->saved_data.at("group").toInt()));
}

//! Identity forward; the backward sums the gradient over the group (Megatron's f).
struct copy_to_group : torch::autograd::Function<copy_to_group> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const tensor_group* g)
    {
        ctx->saved_data["group"] = group_address(*g);
        return x.view_as(x);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads)
    {
        return {group_at(ctx).sum(grads[0]), torch::Tensor()};
    }
};

//! The group's sum forward; identity backward (Megatron's g).
struct reduce_from_group : torch::autograd::Function<reduce_from_group> {
    static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x, const tensor_group* g)
    {
        return g->sum(x);
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext*, torch::autograd::variable_list grads)
    {
        return {grads[0], torch::Tensor()};
    }
};

//! The cross-entropy of vocabulary-parallel logits [N, V/t] for targets [N]: per row.
struct vocab_parallel_loss : torch::autograd::Function<vocab_parallel_loss> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                                 const torch::Tensor& targets, const tensor_group* g)
    {
        const std::int64_t rows = logits.size(0), share = logits.size(1), begin = g->rank() * share;
        // The largest logit of each row over the whole vocabulary: every rank's maxima in its
        // own row of a zero table, summed (adding zeros is exact), then the maximum of each column.
        torch::Tensor maxima = torch::zeros({g->size(), rows}, logits.options());
        maxima[g->rank()] = std::get<0>(logits.max(1));
        const torch::Tensor top = std::get<0>(g->sum(maxima).max(0));
        const torch::Tensor shifted = logits - top.unsqueeze(1);
        const torch::Tensor e = shifted.exp();
        const torch::Tensor mine = targets.ge(begin).logical_and(targets.lt(begin + share));
        const torch::Tensor local = (targets - begin).masked_fill(mine.logical_not(), 0);
        const torch::Tensor target_logit = shifted.gather(1, local.unsqueeze(1)).squeeze(1).masked_fill(mine.logical_not(), 0);
        const torch::Tensor sums = g->sum(torch::stack({e.sum(1), target_logit}));  // one sum for both
        const torch::Tensor denominator = sums[0];
        ctx->save_for_backward({e / denominator.unsqueeze(1), local, mine});
        return denominator.log() - sums[1];
    }
    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads)
    {
        const auto saved = ctx->get_saved_variables();
        torch::Tensor grad = saved[0].clone();  // softmax, minus one at the target (where this rank holds it)
        grad.scatter_add_(1, saved[1].unsqueeze(1), -saved[2].to(grad.scalar_type()).unsqueeze(1));
        return {grad * grads[0].unsqueeze(1), torch::Tensor(), torch::Tensor()};
    }
};

//! Rank `rank`'s share of `whole` along `dim`: each of `blocks` equal blocks cut in `ranks`.
inline torch::Tensor share_of(const torch::Tensor& whole, std::int64_t dim, std::int64_t blocks, int rank, int ranks)
{
    std::vector<std::int64_t> shape = whole.sizes().vec();
    const std::int64_t block = shape[static_cast<std::size_t>(dim)] / blocks, share = block / ranks;
    shape[static_cast<std::size_t>(dim)] = block;
    shape.insert(shape.begin() + dim, blocks);
    std::vector<std::int64_t> out = whole.sizes().vec();
    out[static_cast<std::size_t>(dim)] = blocks * share;
    return whole.detach().reshape(shape).narrow(dim + 1, rank * share, share).reshape(out).clone();
}

} // namespace detail

//! A module whose parameters are split over a tensor group, saying how (for whole_parameters).
struct split_module {
    struct split {
        std::int64_t dim = 0, blocks = 1;
    };
    virtual ~split_module() = default;
    //! How the module's own parameter `name` is split; nullopt: every rank holds it whole.
    virtual std::optional<split> split_of(const std::string& name) const = 0;
    virtual const tensor_group& group() const = 0;
};

struct ColumnParallelLinearOptions {
    std::int64_t blocks = 1;  //!< equal blocks of the output features, each split among the ranks
    bool bias = true;
};

//! y = x W^T + b with this rank's out/t output features (per block): [.., in] -> [.., out/t].
class ColumnParallelLinearImpl : public torch::nn::Module, public split_module {
public:
    ColumnParallelLinearImpl(std::int64_t in, std::int64_t out, tensor_group g, ColumnParallelLinearOptions o = {})
        : group_(std::move(g)), blocks_(o.blocks)
    {
        if (o.blocks < 1 || out % o.blocks != 0)
            throw invalid_argument("ColumnParallelLinear: " + std::to_string(out) + " output features in " +
                                   std::to_string(o.blocks) + " equal blocks (blocks must divide them)");
        group_.share_of(out / o.blocks, "a column-parallel layer's output features per block");
        torch::nn::Linear whole(torch::nn::LinearOptions(in, out).bias(o.bias));  // torch::nn::Linear's draws
        weight = register_parameter("weight", detail::share_of(whole->weight, 0, blocks_, group_.rank(), group_.size()));
        if (o.bias) bias = register_parameter("bias", detail::share_of(whole->bias, 0, blocks_, group_.rank(), group_.size()));
    }
    torch::Tensor forward(const torch::Tensor& x)
    {
        return torch::nn::functional::linear(group_.size() > 1 ? detail::copy_to_group::apply(x, &group_) : x, weight, bias);
    }
    std::optional<split> split_of(const std::string&) const override { return split{0, blocks_}; }
    const tensor_group& group() const override { return group_; }

    torch::Tensor weight, bias;

private:
    tensor_group group_;
    std::int64_t blocks_;
};
TORCH_MODULE(ColumnParallelLinear);

//! y = sum over the group of x_k W_k^T, + b: [.., in/t] (this rank's input features) -> [.., out].
class RowParallelLinearImpl : public torch::nn::Module, public split_module {
public:
    RowParallelLinearImpl(std::int64_t in, std::int64_t out, tensor_group g, bool with_bias = true) : group_(std::move(g))
    {
        group_.share_of(in, "a row-parallel layer's input features");
        torch::nn::Linear whole(torch::nn::LinearOptions(in, out).bias(with_bias));
        weight = register_parameter("weight", detail::share_of(whole->weight, 1, 1, group_.rank(), group_.size()));
        if (with_bias) bias = register_parameter("bias", whole->bias.detach().clone());
    }
    torch::Tensor forward(const torch::Tensor& x)
    {
        if (group_.size() == 1) return torch::nn::functional::linear(x, weight, bias);
        torch::Tensor y = detail::reduce_from_group::apply(torch::nn::functional::linear(x, weight), &group_);
        return bias.defined() ? y + bias : y;
    }
    std::optional<split> split_of(const std::string& name) const override
    {
        if (name == "weight") return split{1, 1};
        return std::nullopt;  // the bias, whole
    }
    const tensor_group& group() const override { return group_; }

    torch::Tensor weight, bias;

private:
    tensor_group group_;
};
TORCH_MODULE(RowParallelLinear);

//! An embedding of `vocab` ids holding this rank's vocab/t rows: [..] ids -> [.., dim].
class VocabParallelEmbeddingImpl : public torch::nn::Module, public split_module {
public:
    VocabParallelEmbeddingImpl(std::int64_t vocab, std::int64_t dim, tensor_group g) : group_(std::move(g))
    {
        share_ = group_.share_of(vocab, "the vocabulary");
        torch::nn::Embedding whole(vocab, dim);  // torch::nn::Embedding's draws
        weight = register_parameter("weight", detail::share_of(whole->weight, 0, 1, group_.rank(), group_.size()));
    }
    torch::Tensor forward(const torch::Tensor& ids)
    {
        if (group_.size() == 1) return torch::nn::functional::embedding(ids, weight);
        const std::int64_t begin = group_.rank() * share_;
        const torch::Tensor elsewhere = ids.lt(begin).logical_or(ids.ge(begin + share_));
        torch::Tensor rows = torch::nn::functional::embedding((ids - begin).masked_fill(elsewhere, 0), weight);
        return detail::reduce_from_group::apply(rows.masked_fill(elsewhere.unsqueeze(-1), 0.0), &group_);
    }
    //! The first id of this rank's rows.
    std::int64_t vocab_begin() const noexcept { return group_.rank() * share_; }
    std::optional<split> split_of(const std::string&) const override { return split{0, 1}; }
    const tensor_group& group() const override { return group_; }

    torch::Tensor weight;

private:
    tensor_group group_;
    std::int64_t share_ = 0;
};
TORCH_MODULE(VocabParallelEmbedding);

//! The cross-entropy of logits over this rank's vocabulary rows ([.., vocab/t], rank k holding
//! ids [k vocab/t, (k+1) vocab/t), as VocabParallelEmbedding and a column-parallel head do) for
//! `targets` [..]: per token (kNone) or summed (kSum). Every target counts (no ignore_index). At
//! t = 1 it is F::cross_entropy.
inline torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets,
                                                  const tensor_group& g, at::Reduction::Reduction reduction)
{
    if (reduction != at::Reduction::None && reduction != at::Reduction::Sum)
        throw invalid_argument("vocab_parallel_cross_entropy: reduction None or Sum (divide a sum yourself)");
    const torch::Tensor flat = logits.reshape({-1, logits.size(-1)});
    const torch::Tensor ids = targets.reshape({-1});
    if (g.size() == 1) {
        namespace F = torch::nn::functional;
        if (reduction == at::Reduction::Sum) return F::cross_entropy(flat, ids, F::CrossEntropyFuncOptions().reduction(torch::kSum));
        return F::cross_entropy(flat, ids, F::CrossEntropyFuncOptions().reduction(torch::kNone)).view(targets.sizes());
    }
    const torch::Tensor per = detail::vocab_parallel_loss::apply(flat, ids, &g);
    return reduction == at::Reduction::Sum ? per.sum() : per.view(targets.sizes());
}

//! Every parameter of `m` whole, in m.parameters() order, on every rank of its group: a split
//! parameter's shares summed into a zero tensor of the whole shape (exact: one share per
//! element), a whole one as this rank holds it. Collective over the group of every split layer.
inline std::vector<torch::Tensor> whole_parameters(torch::nn::Module& m)
{
    std::unordered_map<std::string, std::shared_ptr<torch::nn::Module>> owners;
    for (const auto& item : m.named_modules("", /*include_self=*/false)) owners.emplace(item.key(), item.value());
    std::vector<torch::Tensor> out;
    torch::NoGradGuard no_grad;
    for (const auto& item : m.named_parameters()) {
        const std::string& name = item.key();
        const auto dot = name.rfind('.');
        const split_module* owner = nullptr;
        if (dot == std::string::npos) owner = dynamic_cast<const split_module*>(&m);
        else if (auto it = owners.find(name.substr(0, dot)); it != owners.end())
            owner = dynamic_cast<const split_module*>(it->second.get());
        const auto how = owner ? owner->split_of(dot == std::string::npos ? name : name.substr(dot + 1)) : std::nullopt;
        const torch::Tensor& p = item.value();
        if (!how || owner->group().size() == 1) {
            out.push_back(p.detach().clone());
            continue;
        }
        const tensor_group& g = owner->group();
        std::vector<std::int64_t> shape = p.sizes().vec();
        const auto dim = static_cast<std::size_t>(how->dim);
        const std::int64_t share = shape[dim] / how->blocks;
        std::vector<std::int64_t> blocked = shape;
        blocked[dim] = share * g.size();
        blocked.insert(blocked.begin() + how->dim, how->blocks);
        torch::Tensor whole = torch::zeros(blocked, p.options());
        whole.narrow(how->dim + 1, g.rank() * share, share).copy_(p.detach().reshape([&] {
            auto s = blocked;
            s[dim + 1] = share;
            return s;
        }()));
        shape[dim] *= g.size();
        out.push_back(g.sum(whole).reshape(shape));
    }
    return out;
}

} // namespace tpipe::libtorch
