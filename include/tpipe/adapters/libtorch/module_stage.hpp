#pragma once
// One libtorch pipeline stage: a callable over tensors (modules) and the parameters it trains.
// Part of tpipe/adapters/libtorch.hpp, whose head comment says how a stage runs a unit.
//
// Tied parameters (one tensor held by two stages, e.g. a tied embedding and LM head): stage
// threads must not add into one .grad() at once, so a stage adds its gradients of a tied
// parameter into a buffer of its own, and sum_tied_gradients (cut.hpp) adds the stages' buffers
// into .grad() in stage order after the run (Megatron's tied-gradient all-reduce, in-process):
// the result does not depend on thread timing.
//
// Leaves outside the list: a split backward (backward_weight) takes gradients of the listed
// parameters only, so a tensor that requires grad, is reached by the stage's graph and is not
// listed would lose its gradient silently; the stage refuses it, naming it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/nn.h>
#include <torch/utils.h>

#include "tpipe/adapters/libtorch/blas_threads.hpp"
#include "tpipe/adapters/libtorch/kv_cache.hpp"
#include "tpipe/adapters/libtorch/split_backward.hpp"
#include "tpipe/adapters/libtorch/tensor_spec.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/exec/gradients.hpp"
#include "tpipe/exec/stage.hpp"

namespace tpipe::libtorch {

namespace detail {
inline void accumulate(torch::Tensor& into, const torch::Tensor& g)
{
    if (!g.defined()) return;
    if (into.defined()) into.add_(g);
    else into = g.clone();
}
inline void accumulate_grad(torch::Tensor& leaf, const torch::Tensor& g)
{
    if (!g.defined()) return;
    if (leaf.grad().defined()) leaf.mutable_grad().add_(g);
    else leaf.mutable_grad() = g.clone();
}
//! Who a parameter is, by tensor: "'3.logits.weight' of stage 1 (...)"; filled by tie().
using parameter_book = std::map<const void*, std::string>;
} // namespace detail

class module_stage {
public:
    using input = torch::Tensor;
    using output = torch::Tensor;
    using function = std::function<torch::Tensor(torch::Tensor)>;

    //! `name` says which stage this is in errors ("stage 1 (modules [3, 6))"); `takes` is
    //! checked against every received input; `producer` names the stage before (or is empty).
    module_stage(function fn, std::vector<torch::Tensor> parameters, std::string name, tensor_spec takes = {},
                 std::string producer = {})
        : fn_(std::move(fn)), params_(std::move(parameters)), name_(std::move(name)), takes_(std::move(takes)),
          producer_(std::move(producer))
    {
        std::unordered_set<const void*> seen;  // a tensor registered twice (tied in one stage) counts once
        std::erase_if(params_, [&](const torch::Tensor& p) {
            return !p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second;
        });
        own_.resize(params_.size());
        tied_.assign(params_.size(), false);
        names_.resize(params_.size());
    }

    //! A user module (any holder with forward(Tensor) -> Tensor) as one stage; its parameters are
    //! named as in named_parameters().
    template <class Holder>
        requires requires(Holder h, torch::Tensor x) {
            { h->forward(x) } -> std::convertible_to<torch::Tensor>;
            h->named_parameters();
        }
    static module_stage of(Holder m, std::string name = "stage", tensor_spec takes = {})
    {
        std::vector<torch::Tensor> params;
        std::vector<std::string> names;
        std::unordered_set<const void*> seen;
        for (const auto& p : m->named_parameters())
            if (p.value().requires_grad() && seen.insert(p.value().unsafeGetTensorImpl()).second) {
                params.push_back(p.value());
                names.push_back(p.key());
            }
        module_stage s([m](torch::Tensor x) mutable { return m->forward(std::move(x)); }, std::move(params),
                       std::move(name), std::move(takes));
        s.name_parameters(std::move(names));
        return s;
    }

    //! A stage another process runs (an MPI pipeline built only where it runs): it holds nothing
    //! and refuses to run here.
    static module_stage elsewhere(std::string name)
    {
        return module_stage(
            [name](torch::Tensor) -> torch::Tensor {
                throw tpipe::invalid_program(name + " was built as run elsewhere (module_stage::elsewhere) but this "
                                                    "process was asked to run it; build it here for the ranks this "
                                                    "process runs");
            },
            {}, name);
    }

    const std::string& name() const noexcept { return name_; }
    const tensor_spec& takes() const noexcept { return takes_; }
    const std::vector<torch::Tensor>& parameters() const noexcept { return params_; }

    //! Names of the parameters, in their order (for errors); cut() and of() give them.
    void name_parameters(std::vector<std::string> names)
    {
        if (names.size() != params_.size())
            throw tpipe::invalid_argument(name_ + ": " + std::to_string(names.size()) + " parameter names for " +
                                          std::to_string(params_.size()) + " parameters that require grad");
        names_ = std::move(names);
    }
    //! Parameter i's name as given ("3.logits.weight"; empty when unnamed): its name in a
    //! checkpoint (libtorch/checkpoint.hpp).
    const std::string& parameter_key(std::size_t i) const { return names_.at(i); }
    //! "'3.logits.weight'", or "parameter 2 ([64, 32] Float)" when unnamed.
    std::string parameter_name(std::size_t i) const
    {
        return names_.at(i).empty() ? "parameter " + std::to_string(i) + " (" + describe(params_.at(i)) + ")"
                                    : "'" + names_[i] + "'";
    }

    //! Parameter i is also another stage's (set by tie()): its gradient goes to this stage's own
    //! buffer until sum_tied_gradients.
    void set_tied(std::size_t i) { tied_.at(i) = true; }
    bool tied(std::size_t i) const { return tied_.at(i); }
    //! Names every parameter of the pipeline, for the error about a leaf outside the list.
    void set_book(std::shared_ptr<const detail::parameter_book> book) { book_ = std::move(book); }

    //! Adds this stage's gradients of its tied parameters into their .grad() and clears them.
    //! Call only while no stage runs (sum_tied_gradients does, stage by stage in order).
    void add_tied_gradients()
    {
        for (std::size_t i = 0; i < params_.size(); ++i)
            if (own_[i].defined()) {
                detail::accumulate_grad(params_[i], own_[i]);
                own_[i] = torch::Tensor();
            }
    }

    torch::Tensor forward(const unit& u, torch::Tensor in)
    {
        detail::limit_blas_threads_once();
        check_input(in);
        if (u.microbatch == 0 && u.slice == 0) refuse_unsummed();
        saved s;
        s.in = in.is_floating_point() ? in.detach().requires_grad_(true) : std::move(in);
        detail::forward_frame frame;
        frame.u = &u;
        {
            detail::frame_scope scope(frame);
            s.out = fn_(s.in);
        }
        s.produced = std::move(frame.produced);
        s.consumed = std::move(frame.consumed);
        torch::Tensor sent = s.out.detach().contiguous();
        saved_[key(u)] = std::move(s);
        return sent;
    }

    //! The forward of one unit without autograd, keeping nothing (check_token_slicing).
    torch::Tensor evaluate(const unit& u, torch::Tensor in)
    {
        check_input(in);
        torch::NoGradGuard no_grad;
        detail::forward_frame frame;
        frame.u = &u;
        detail::frame_scope scope(frame);
        return fn_(std::move(in));
    }

    torch::Tensor backward(const unit& u, torch::Tensor grad_out)
    {
        saved s = take(u);
        auto [roots, grads] = roots_of(s, grad_out);
        if (!any_tied()) {
            torch::autograd::backward(roots, grads);  // into every leaf's .grad(), as plain libtorch
            return s.in.requires_grad() ? s.in.grad() : torch::Tensor();
        }
        check_leaves(s, roots);  // below, only the listed tensors get their gradients
        std::vector<torch::Tensor> wrt = s.consumed;
        const bool with_input = s.in.requires_grad();
        if (with_input) wrt.push_back(s.in);
        wrt.insert(wrt.end(), params_.begin(), params_.end());
        auto g = torch::autograd::grad(roots, wrt, grads, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
        const std::size_t p0 = s.consumed.size() + (with_input ? 1 : 0);
        for (std::size_t i = 0; i < s.consumed.size(); ++i) detail::accumulate_grad(s.consumed[i], g[i]);
        for (std::size_t i = 0; i < params_.size(); ++i) add_parameter_gradient(i, g[p0 + i]);
        return with_input ? g[s.consumed.size()] : torch::Tensor();
    }

    //! The input part of a split backward: the input's gradient and those of the earlier slices'
    //! cached keys and values (which the earlier slices' backward needs); the graph and the
    //! gradients at its cut are kept for backward_weight (libtorch/split_backward.hpp).
    torch::Tensor backward_input(const unit& u, torch::Tensor grad_out)
    {
        saved& s = find(u);
        auto [roots, grads] = roots_of(s, grad_out);
        check_leaves(s, roots);  // backward_weight takes the listed parameters' gradients only
        std::vector<torch::Tensor> inputs = s.consumed;
        const bool with_input = s.in.requires_grad();
        if (with_input) inputs.push_back(s.in);
        auto g = s.split.input_half(std::move(roots), std::move(grads), inputs, params_);
        for (std::size_t i = 0; i < s.consumed.size(); ++i) detail::accumulate_grad(s.consumed[i], g[i]);
        return with_input ? g.back() : torch::Tensor();
    }

    //! The weight part: the parameters' gradients from the cut backward_input kept, added into
    //! their .grad() (a tied parameter's into this stage's own buffer).
    void backward_weight(const unit& u)
    {
        saved s = take(u);
        if (!s.split.started())
            throw tpipe::invalid_program(name_ + ": backward_weight of microbatch " + std::to_string(u.microbatch) +
                                         " slice " + std::to_string(u.slice) + " before its backward_input");
        auto g = s.split.weight_half();
        for (std::size_t i = 0; i < params_.size(); ++i) add_parameter_gradient(i, g[i]);
    }

    //! The parameters' gradients as float spans, for tpipe::data_parallel (missing ones are
    //! made zero first, so that every replica reduces the same list); a tied parameter's is this
    //! stage's own buffer (sum_tied_gradients adds it afterwards).
    std::vector<std::span<float>> gradients()
    {
        std::vector<std::span<float>> out;
        for (std::size_t i = 0; i < params_.size(); ++i) {
            torch::Tensor& p = params_[i];
            if (p.scalar_type() != torch::kFloat)
                throw tpipe::invalid_argument(name_ + ": gradients() all-reduces float parameters, but " +
                                              parameter_name(i) + " is " + describe(p) +
                                              "; train in float32 or reduce the gradients yourself");
            torch::Tensor& g = tied_[i] ? own_[i] : p.mutable_grad();
            if (!g.defined()) g = torch::zeros_like(p);
            if (!g.is_contiguous()) g = g.contiguous();
            out.emplace_back(g.data_ptr<float>(), static_cast<std::size_t>(g.numel()));
        }
        return out;
    }

private:
    struct saved {
        torch::Tensor in, out;
        std::vector<std::pair<torch::Tensor, torch::Tensor>> produced;
        std::vector<torch::Tensor> consumed;
        detail::split_backward split;  //!< started by backward_input, finished by backward_weight
    };

    static std::pair<int, int> key(const unit& u) { return {u.microbatch, u.slice}; }

    bool any_tied() const
    {
        for (bool t : tied_)
            if (t) return true;
        return false;
    }

    void add_parameter_gradient(std::size_t i, const torch::Tensor& g)
    {
        if (tied_[i]) detail::accumulate(own_[i], g);
        else detail::accumulate_grad(params_[i], g);
    }

    void check_input(const torch::Tensor& in) const
    {
        if (!takes_.accepts(in))
            throw tpipe::invalid_argument(
                name_ + " takes " + takes_.text() + " but " + (producer_.empty() ? "the source" : producer_) +
                " gave it " + describe(in) +
                (producer_.empty() ? "" : "; cut the model where the two agree, or make the module at the end of " +
                                              producer_ + " produce what " + name_ + " takes"));
    }

    //! A new iteration starts while a tied gradient of the last one was never added to .grad().
    void refuse_unsummed() const
    {
        for (std::size_t i = 0; i < params_.size(); ++i)
            if (own_[i].defined())
                throw tpipe::invalid_program(
                    name_ + ": its gradient of the tied parameter " + parameter_name(i) +
                    " from the last run was never added to .grad(); call tpipe::libtorch::sum_tied_gradients(pipe) "
                    "after every run, before the optimizer steps");
    }

    //! Every leaf that requires grad and that the stage's graph reaches must be a listed
    //! parameter, the input, or an earlier slice's cached key or value.
    void check_leaves(const saved& s, const std::vector<torch::Tensor>& roots) const
    {
        std::unordered_set<const void*> ours;
        for (const auto& p : params_) ours.insert(p.unsafeGetTensorImpl());
        for (const auto& c : s.consumed) ours.insert(c.unsafeGetTensorImpl());
        if (s.in.defined()) ours.insert(s.in.unsafeGetTensorImpl());
        std::unordered_set<const torch::autograd::Node*> seen;
        std::vector<torch::autograd::Node*> todo;
        for (const auto& r : roots)
            if (r.grad_fn()) todo.push_back(r.grad_fn().get());
        while (!todo.empty()) {
            torch::autograd::Node* n = todo.back();
            todo.pop_back();
            for (const auto& e : n->next_edges()) {
                torch::autograd::Node* next = e.function.get();
                if (!next || !seen.insert(next).second) continue;
                if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(next)) {
                    if (!ours.count(acc->variable.unsafeGetTensorImpl())) refuse_leaf(acc->variable);
                } else {
                    todo.push_back(next);
                }
            }
        }
    }

    [[noreturn]] void refuse_leaf(const torch::Tensor& leaf) const
    {
        std::string who = "a " + describe(leaf) + " tensor (no parameter of the pipeline's stages)";
        if (book_)
            if (auto it = book_->find(leaf.unsafeGetTensorImpl()); it != book_->end()) who = "the parameter " + it->second;
        throw tpipe::invalid_argument(
            name_ + ": its graph reaches " + who + ", which requires grad but is not among this stage's "
            "parameters, so a split backward (backward_weight: zb-h1, zb-v, ...) would drop its gradient; add it "
            "to this stage's parameters (a tensor two stages use, such as a tied embedding and LM head, is listed "
            "by both: tpipe::libtorch::tie keeps each stage's gradient apart and sum_tied_gradients adds them)");
    }

    saved& find(const unit& u)
    {
        auto it = saved_.find(key(u));
        if (it == saved_.end())
            throw tpipe::invalid_program(name_ + ": backward of microbatch " + std::to_string(u.microbatch) +
                                         " slice " + std::to_string(u.slice) + " without its forward");
        return it->second;
    }
    saved take(const unit& u)
    {
        saved s = std::move(find(u));
        saved_.erase(key(u));
        return s;
    }

    //! The output with its gradient, and the cached keys/values with what later slices gave them.
    std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> roots_of(const saved& s,
                                                                               const torch::Tensor& grad_out) const
    {
        if (!grad_out.defined() || !grad_out.sizes().equals(s.out.sizes()))
            throw tpipe::invalid_argument(name_ + " produced " + describe(s.out) + " but its output gradient is " +
                                          describe(grad_out) + "; the gradient must have the output's shape");
        std::vector<torch::Tensor> roots{s.out}, grads{grad_out};
        for (const auto& [value, leaf] : s.produced)
            if (leaf.grad().defined()) {
                roots.push_back(value);
                grads.push_back(leaf.grad());
            }
        return {std::move(roots), std::move(grads)};
    }

    function fn_;
    std::vector<torch::Tensor> params_;
    std::vector<torch::Tensor> own_;  //!< this stage's gradients of its tied parameters
    std::vector<bool> tied_;
    std::vector<std::string> names_;
    std::shared_ptr<const detail::parameter_book> book_;
    std::string name_;
    tensor_spec takes_;
    std::string producer_;
    std::map<std::pair<int, int>, saved> saved_;
};
static_assert(tpipe::split_backward_stage<module_stage> && tpipe::exposes_gradients<module_stage>);

} // namespace tpipe::libtorch
