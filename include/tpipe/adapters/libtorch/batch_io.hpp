#pragma once
// One batch as the pipeline's io (tpipe::run_io), so that a libtorch user does not slice units
// by hand: the first stage reads each unit's rows, and with token slices its tokens, of the
// inputs; the last stage's output of each unit goes through the user's loss with the same rows
// and tokens of the targets. Part of tpipe/adapters/libtorch.hpp.
//
//   double loss = 0;
//   auto io = tpipe::libtorch::batch_io(inputs, targets, [](const torch::Tensor& y, const torch::Tensor& t) {
//       return torch::nn::functional::cross_entropy(y.reshape({-1, y.size(-1)}), t.reshape({-1}));
//   }, loss);
//   runner.run(io);  // the parameters' .grad() and `loss` are the batch mean's
#include <functional>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/exec/run_options.hpp"

namespace tpipe::libtorch {

//! The loss of one unit: the mean over its elements of the output against the targets (a
//! torch::nn::functional loss with its default reduction, "mean"). batch_io weights it by the
//! unit's share of the batch's target elements, so that the units add up to the batch's mean.
using unit_loss = std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& targets)>;

//! Where a batch holds its tokens: a dimension of inputs and targets (rows are always dim 0),
//! or none (-1: a unit must then hold whole samples, no token slices).
struct batch_dims {
    int tokens = 1;
};

namespace detail {
inline std::string sizes_of(const torch::Tensor& t)
{
    std::string s = "[";
    for (std::int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
}
//! Unit u's rows (and tokens) of a batch tensor, refused when the unit reaches outside it.
inline torch::Tensor unit_part(const torch::Tensor& t, const unit& u, batch_dims dims, const char* what)
{
    if (u.row_end > t.size(0))
        throw invalid_argument(std::string("batch_io: a unit holds rows [") + std::to_string(u.row_begin) + ", " +
                               std::to_string(u.row_end) + ") but the " + what + " have " + std::to_string(t.size(0)) +
                               " rows (shape " + sizes_of(t) + "): the scheme's batch must be the tensors' rows");
    torch::Tensor part = t.slice(0, u.row_begin, u.row_end);
    if (dims.tokens < 0) {
        if (u.token_begin != 0)
            throw invalid_argument("batch_io: a unit holds tokens [" + std::to_string(u.token_begin) + ", " +
                                   std::to_string(u.token_end) + ") but batch_dims::tokens is -1 (no token "
                                   "dimension): token slices need the dimension that holds the tokens");
        return part;
    }
    if (u.token_end > t.size(dims.tokens))
        throw invalid_argument(std::string("batch_io: a unit holds tokens [") + std::to_string(u.token_begin) + ", " +
                               std::to_string(u.token_end) + ") but the " + what + " have " +
                               std::to_string(t.size(dims.tokens)) + " on dimension " + std::to_string(dims.tokens) +
                               " (shape " + sizes_of(t) + "): the scheme's sequence length must be theirs");
    return part.slice(dims.tokens, u.token_begin, u.token_end);
}
} // namespace detail

//! The io of one batch: source gives unit u's part of `inputs`; output_grad computes `loss` on
//! the last stage's output and u's part of `targets`, weighted by u's share of the target
//! elements, adds it to `loss_sum` and returns its gradient with respect to the output (what
//! starts the last stage's backward). The io holds the tensors (no copy: libtorch shares them)
//! and refers to `loss_sum`, which must outlive the run.
inline run_io<torch::Tensor, torch::Tensor> batch_io(torch::Tensor inputs, torch::Tensor targets, unit_loss loss,
                                                     double& loss_sum, batch_dims dims = {})
{
    if (!inputs.defined() || !targets.defined() || inputs.dim() < 1 || targets.dim() < 1)
        throw invalid_argument("batch_io: needs inputs and targets with rows on dimension 0");
    if (inputs.size(0) != targets.size(0))
        throw invalid_argument("batch_io: the inputs have " + std::to_string(inputs.size(0)) + " rows and the targets " +
                               std::to_string(targets.size(0)) + " (shapes " + detail::sizes_of(inputs) + " and " +
                               detail::sizes_of(targets) + "): one target row per input row");
    if (dims.tokens == 0 || dims.tokens >= inputs.dim() || dims.tokens >= targets.dim())
        throw invalid_argument("batch_io: batch_dims::tokens is " + std::to_string(dims.tokens) + " for inputs " +
                               detail::sizes_of(inputs) + " and targets " + detail::sizes_of(targets) +
                               ": it must be a dimension past the rows of both, or -1 for none");
    if (dims.tokens > 0 && inputs.size(dims.tokens) != targets.size(dims.tokens))
        throw invalid_argument("batch_io: the inputs hold " + std::to_string(inputs.size(dims.tokens)) +
                               " tokens and the targets " + std::to_string(targets.size(dims.tokens)) +
                               " on dimension " + std::to_string(dims.tokens) + ": one target per input token");
    if (!loss) throw invalid_argument("batch_io: needs a loss function");
    run_io<torch::Tensor, torch::Tensor> io;
    io.source = [inputs, dims](const unit& u) { return detail::unit_part(inputs, u, dims, "inputs"); };
    const double all = static_cast<double>(targets.numel());
    io.output_grad = [targets, loss = std::move(loss), dims, all, &loss_sum](const unit& u, torch::Tensor&& out) {
        const torch::Tensor t = detail::unit_part(targets, u, dims, "targets");
        torch::Tensor y = out.detach().requires_grad_();  // a leaf: its .grad() starts the backward
        const torch::Tensor mean = loss(y, t);
        if (mean.numel() != 1)
            throw invalid_argument("batch_io: the loss returned a tensor of shape " + detail::sizes_of(mean) +
                                   "; it must return the unit's mean, a scalar (reduction \"mean\")");
        const torch::Tensor share = mean * (static_cast<double>(t.numel()) / all);
        share.backward();
        loss_sum += share.item<double>();
        return y.grad();
    };
    return io;
}

} // namespace tpipe::libtorch
