#pragma once
// tpipe over libtorch: torch::nn::Modules as pipeline stages, torch::Tensor as the payload.
// Only included on purpose (tpipe.hpp does not include it): it needs libtorch's headers and
// libraries (CMake: find_package(Torch), see docs/libtorch.md).
//
//   auto model = torch::nn::Sequential(Embed(cfg), Block(cfg), Block(cfg), Head(cfg));
//   auto stages = tpipe::libtorch::cut(model, {0, 2, 4});        // modules [0,2) and [2,4)
//   tpipe::uniform_pipeline<tpipe::libtorch::module_stage> pipe(std::move(stages));
//   tpipe::run(pipe, prog, engine, io);                          // model's .grad() filled
//   optimizer.step();
//
// How a stage runs a unit (rows and tokens of a microbatch, tpipe/core/unit.hpp):
// - forward: the received tensor is checked against what the stage takes (tensor_spec; a
//   mismatch is a tpipe::invalid_argument naming both stages and both shapes, raised before
//   libtorch sees the tensor), made a leaf that requires grad (so autograd stops at the stage
//   boundary and its .grad is the input gradient), and run through the modules with autograd
//   recording; the stage keeps the graph and sends the output detached.
// - backward: torch::autograd::backward from the kept output with the received gradient; the
//   parameters' .grad() accumulate as in an unpipelined backward, and the input leaf's gradient
//   is returned.
// - split backward (zero-bubble schedules): backward_input is torch::autograd::grad with
//   respect to the input only (graph retained), backward_weight is torch::autograd::grad with
//   respect to the parameters, added into their .grad(). Exact, but autograd offers no way to
//   keep the activation gradients of the input pass for the weight pass, so the weight pass
//   walks the graph again: I + W costs about one backward plus the activation-gradient part,
//   where a hand-written split costs one backward.
// - token slices: modules that need to know which tokens a slice holds read current_unit() /
//   context_tokens() (positions), and causal attention keeps earlier slices' keys and values in
//   a kv_cache, whose gradients flow back to the slice that made them (see kv_cache).
//
// Over MPI (tpipe::mpi::transport) a tensor crosses as its dtype and shape (the header) and its
// bytes (the body); see payload_traits<torch::Tensor> below.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <torch/autograd.h>
#include <torch/nn.h>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/exec/gradients.hpp"
#include "tpipe/exec/payload_traits.hpp"
#include "tpipe/exec/stage.hpp"

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

namespace detail {
//! What one forward of one unit recorded while its modules ran (see kv_cache).
struct forward_frame {
    const unit* u = nullptr;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> produced;  //!< (cached value with graph, its leaf)
    std::vector<torch::Tensor> consumed;                           //!< leaves of earlier slices read
};
inline thread_local forward_frame* current_frame = nullptr;

struct frame_scope {
    forward_frame* previous;
    explicit frame_scope(forward_frame& f) : previous(current_frame) { current_frame = &f; }
    ~frame_scope() { current_frame = previous; }
    frame_scope(const frame_scope&) = delete;
    frame_scope& operator=(const frame_scope&) = delete;
};

inline void accumulate_grad(torch::Tensor& leaf, const torch::Tensor& g)
{
    if (!g.defined()) return;
    if (leaf.grad().defined()) leaf.mutable_grad().add_(g);
    else leaf.mutable_grad() = g.clone();
}
} // namespace detail

//! The unit whose forward this thread runs (inside a module_stage's forward), or nullptr
//! (plain libtorch: the whole batch is one unit).
inline const unit* current_unit() noexcept
{
    return detail::current_frame ? detail::current_frame->u : nullptr;
}

//! Tokens before the current slice (its position offset): 0 outside a pipeline.
inline std::int64_t context_tokens() noexcept
{
    const unit* u = current_unit();
    return u ? u->token_begin : 0;
}

//! The keys and values of the earlier token slices of each microbatch, for causal attention
//! across slices (TeraPipe). A module owns one and calls extend() with its slice's keys and
//! values; it gets back those of every token up to the end of the slice.
//!
//! Gradients: an earlier slice's keys and values are kept as leaves, so that the backward of a
//! later slice accumulates into them instead of walking the earlier slice's graph (once per
//! later slice); the stage then starts the earlier slice's backward from its output and from its
//! cached keys and values with those accumulated gradients. Runs in the stage's thread, in the
//! runtime's slice order (forward in order, backward in reverse).
class kv_cache {
public:
    //! token_dim: the dimension of k and v that indexes tokens (default: -2, as in
    //! [rows, heads, tokens, head_dim]).
    explicit kv_cache(std::int64_t token_dim = -2) : dim_(token_dim) {}

    //! k, v of this slice -> k, v of tokens [0, slice end). Outside a pipeline: unchanged.
    std::pair<torch::Tensor, torch::Tensor> extend(const torch::Tensor& k, const torch::Tensor& v)
    {
        detail::forward_frame* f = detail::current_frame;
        if (!f) return {k, v};
        auto& earlier = by_microbatch_[f->u->microbatch];
        if (f->u->slice == 0) earlier.clear();
        if (static_cast<int>(earlier.size()) != f->u->slice)
            throw tpipe::invalid_argument("kv_cache: slice " + std::to_string(f->u->slice) + " of microbatch " +
                                          std::to_string(f->u->microbatch) + " arrived after " +
                                          std::to_string(earlier.size()) +
                                          " earlier slices; the slices of a microbatch must run in token order");
        std::vector<torch::Tensor> ks, vs;
        for (auto& [kl, vl] : earlier) {
            ks.push_back(kl);
            vs.push_back(vl);
            for (const auto* t : {&kl, &vl})
                if (t->requires_grad()) f->consumed.push_back(*t);
        }
        ks.push_back(k);
        vs.push_back(v);
        auto leaf = [](const torch::Tensor& t) { return t.detach().requires_grad_(t.requires_grad()); };
        earlier.emplace_back(leaf(k), leaf(v));
        f->produced.emplace_back(k, earlier.back().first);
        f->produced.emplace_back(v, earlier.back().second);
        return {torch::cat(ks, dim_), torch::cat(vs, dim_)};
    }

private:
    std::int64_t dim_;
    std::map<int, std::vector<std::pair<torch::Tensor, torch::Tensor>>> by_microbatch_;
};

//! One pipeline stage: a callable over tensors (modules) and the parameters it trains.
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
        std::erase_if(params_, [](const torch::Tensor& p) { return !p.requires_grad(); });
    }

    //! A user module (any holder with forward(Tensor) -> Tensor) as one stage.
    template <class Holder>
        requires requires(Holder h, torch::Tensor x) {
            { h->forward(x) } -> std::convertible_to<torch::Tensor>;
            h->parameters();
        }
    static module_stage of(Holder m, std::string name = "stage", tensor_spec takes = {})
    {
        auto params = m->parameters();
        return module_stage([m](torch::Tensor x) mutable { return m->forward(std::move(x)); }, std::move(params),
                            std::move(name), std::move(takes));
    }

    const std::string& name() const noexcept { return name_; }
    const tensor_spec& takes() const noexcept { return takes_; }

    torch::Tensor forward(const unit& u, torch::Tensor in)
    {
        if (!takes_.accepts(in))
            throw tpipe::invalid_argument(
                name_ + " takes " + takes_.text() + " but " + (producer_.empty() ? "the source" : producer_) +
                " gave it " + describe(in) +
                (producer_.empty() ? "" : "; cut the model where the two agree, or make the module at the end of " +
                                              producer_ + " produce what " + name_ + " takes"));
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

    torch::Tensor backward(const unit& u, torch::Tensor grad_out)
    {
        saved s = take(u);
        auto [roots, grads] = roots_of(s, grad_out);
        torch::autograd::backward(roots, grads);
        return s.in.requires_grad() ? s.in.grad() : torch::Tensor();
    }

    //! The input part of a split backward: the input's gradient and those of the earlier slices'
    //! cached keys and values (which the earlier slices' backward needs); the graph is kept for
    //! backward_weight.
    torch::Tensor backward_input(const unit& u, torch::Tensor grad_out)
    {
        saved& s = find(u);
        std::tie(s.roots, s.grads) = roots_of(s, grad_out);
        std::vector<torch::Tensor> wrt = s.consumed;
        const bool with_input = s.in.requires_grad();
        if (with_input) wrt.push_back(s.in);
        if (wrt.empty()) return {};
        auto g = torch::autograd::grad(s.roots, wrt, s.grads, /*retain_graph=*/true, /*create_graph=*/false,
                                       /*allow_unused=*/true);
        for (std::size_t i = 0; i < s.consumed.size(); ++i) detail::accumulate_grad(s.consumed[i], g[i]);
        return with_input ? g.back() : torch::Tensor();
    }

    //! The weight part: the parameters' gradients, added into their .grad().
    void backward_weight(const unit& u)
    {
        saved s = take(u);
        if (s.roots.empty())
            throw tpipe::invalid_program(name_ + ": backward_weight of microbatch " + std::to_string(u.microbatch) +
                                         " slice " + std::to_string(u.slice) + " before its backward_input");
        if (params_.empty()) return;
        auto g = torch::autograd::grad(s.roots, params_, s.grads, /*retain_graph=*/false, /*create_graph=*/false,
                                       /*allow_unused=*/true);
        for (std::size_t i = 0; i < params_.size(); ++i) detail::accumulate_grad(params_[i], g[i]);
    }

    //! The parameters' gradients as float spans, for tpipe::data_parallel (missing ones are
    //! made zero first, so that every replica reduces the same list).
    std::vector<std::span<float>> gradients()
    {
        std::vector<std::span<float>> out;
        for (auto& p : params_) {
            if (p.scalar_type() != torch::kFloat)
                throw tpipe::invalid_argument(name_ + ": gradients() all-reduces float parameters, but one is " +
                                              describe(p) + "; train in float32 or reduce the gradients yourself");
            if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
            torch::Tensor& g = p.mutable_grad();
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
        std::vector<torch::Tensor> roots, grads;  //!< set by backward_input, used by backward_weight
    };

    static std::pair<int, int> key(const unit& u) { return {u.microbatch, u.slice}; }

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
    std::string name_;
    tensor_spec takes_;
    std::string producer_;
    std::map<std::pair<int, int>, saved> saved_;
};
static_assert(tpipe::split_backward_stage<module_stage> && tpipe::exposes_gradients<module_stage>);

//! A Sequential cut into stages: stage i runs modules [cuts[i], cuts[i+1]) (0 = cuts[0] < ... <
//! cuts.back() = seq->size()). What each stage takes is inferred (infer_input) unless `takes`
//! gives it (one spec per stage).
inline std::vector<module_stage> cut(torch::nn::Sequential seq, const std::vector<std::size_t>& cuts,
                                     std::vector<tensor_spec> takes = {})
{
    const std::size_t n = seq->size();
    bool ok = cuts.size() >= 2 && cuts.front() == 0 && cuts.back() == n;
    for (std::size_t i = 1; ok && i < cuts.size(); ++i) ok = cuts[i - 1] < cuts[i];
    if (!ok) {
        std::string got;
        for (auto c : cuts) got += (got.empty() ? "" : ", ") + std::to_string(c);
        throw tpipe::invalid_argument("libtorch::cut: cuts must rise strictly from 0 to the Sequential's " +
                                      std::to_string(n) + " modules, got {" + got + "}");
    }
    const std::size_t stages = cuts.size() - 1;
    if (!takes.empty() && takes.size() != stages)
        throw tpipe::invalid_argument("libtorch::cut: " + std::to_string(takes.size()) + " tensor_specs for " +
                                      std::to_string(stages) + " stages; give one per stage or none");
    std::vector<module_stage> out;
    std::string previous;
    for (std::size_t i = 0; i < stages; ++i) {
        std::vector<torch::nn::AnyModule> range;
        std::vector<torch::Tensor> params;
        for (std::size_t m = cuts[i]; m < cuts[i + 1]; ++m) {
            range.push_back(*(seq->begin() + static_cast<std::ptrdiff_t>(m)));
            for (auto& p : seq->ptr(m)->parameters()) params.push_back(p);
        }
        std::string name = "stage " + std::to_string(i) + " (modules [" + std::to_string(cuts[i]) + ", " +
                           std::to_string(cuts[i + 1]) + "), from " + seq->ptr(cuts[i])->name() + ")";
        auto fn = [range = std::move(range)](torch::Tensor x) mutable {
            for (auto& m : range) x = m.forward<torch::Tensor>(std::move(x));
            return x;
        };
        tensor_spec spec = takes.empty() ? infer_input(*seq->ptr(cuts[i])) : takes[i];
        out.emplace_back(std::move(fn), std::move(params), name, std::move(spec), previous);
        previous = name;
    }
    return out;
}

} // namespace tpipe::libtorch

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
