#pragma once
// A torch::nn::Sequential trained the PipeTransformer way: tpipe::libtorch::freezable_sequential
// is a tpipe::elastic::process_freezable_model, so tpipe::elastic::thread_driver (threads) and
// tpipe::mpi::elastic_driver (one process per device) freeze its leading modules, re-cut the rest
// into a shorter pipeline, add data-parallel replicas and cache the frozen prefix's outputs.
// Part of tpipe/adapters/libtorch.hpp.
//
//   tpipe::libtorch::freezable_sequential::parts p{
//       .model = make_model(), .adamw = torch::optim::AdamWOptions(1e-3),
//       .samples = [&](std::span<const std::int64_t> ids) { return my_rows(ids); },  // {inputs, targets}
//       .loss = [](const torch::Tensor& y, const torch::Tensor& t) { return my_summed_loss(y, t); },
//       .unit_costs = costs};                                     // one per module
//   tpipe::elastic::thread_driver<tpipe::libtorch::freezable_sequential> d(
//       [&] { return std::make_unique<tpipe::libtorch::freezable_sequential>(p_with_a_fresh_model()); }, samples, o);
//
// Units are the Sequential's modules. Freezing module m sets requires_grad(false) on its
// parameters, drops their gradients and AdamW state; the frozen prefix runs under NoGradGuard
// (run_frozen) and AutoCache keeps its outputs as tensors. A new replica receives every parameter
// and buffer, the trainable parameters' AdamW moments and the step count (trainable_state), so
// the moments are allocated up front, as zeros at step 0 (what AdamW's first step would allocate).
//
// A tensor several modules share (a tied embedding and LM head) is the first module's: it trains
// with it and freezes with it, after which the later modules read it frozen (so the cached
// frozen outputs stay valid). While it trains, stages that share it keep their gradients apart
// (cut() ties them) and finish_step adds them in stage order.
//
// The loss: `loss(outputs, targets)` returns the SUM of the per-target losses of the rows (and,
// under token slices, the tokens) it is given; the model divides by the replica's target count,
// so the replica's loss is the mean over its share and every microbatch or token slice adds its
// part. Rows are dim 0 of inputs, targets and the frozen prefix's outputs; with `tokens` > 0,
// dim 1 holds that many tokens and token slices cut it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "tpipe/adapters/libtorch/checkpoint.hpp"
#include "tpipe/adapters/libtorch/cut.hpp"
#include "tpipe/adapters/libtorch/module_stage.hpp"
#include "tpipe/adapters/libtorch/tensor_payload.hpp"  // frozen outputs are cached as tensors
#include "tpipe/core/error.hpp"
#include "tpipe/elastic/freezable_model.hpp"
#include "tpipe/exec/gradients.hpp"

namespace tpipe::libtorch {

class freezable_sequential {
public:
    using stage_type = module_stage;
    using frozen_output = torch::Tensor;  //!< one sample's frozen-prefix output (rows dim of size 1)

    //! The rows of samples `ids`: {inputs of module 0, targets of the loss}, rows on dim 0.
    using sample_fn = std::function<std::pair<torch::Tensor, torch::Tensor>(std::span<const std::int64_t> ids)>;
    //! The summed loss of outputs against targets (reduction sum, a scalar tensor).
    using loss_fn = std::function<torch::Tensor(const torch::Tensor& outputs, const torch::Tensor& targets)>;

    struct parts {
        torch::nn::Sequential model{nullptr};
        torch::optim::AdamWOptions adamw{1e-3};
        sample_fn samples;
        loss_fn loss;
        std::vector<double> unit_costs;  //!< one per module: the partitioner's weights
        int freezable = -1;              //!< leading modules that may freeze (-1: all but the last)
        std::int64_t tokens = 0;         //!< tokens on dim 1 that token slices cut (0: no token dim)
    };

    explicit freezable_sequential(parts p) : p_(std::move(p))
    {
        const std::string me = "tpipe::libtorch::freezable_sequential: ";
        if (!p_.model || p_.model->size() < 2)
            throw tpipe::invalid_argument(me + "needs a Sequential of at least 2 modules (units), got " +
                                          std::to_string(p_.model ? p_.model->size() : 0));
        const int n = static_cast<int>(p_.model->size());
        if (!p_.samples || !p_.loss) throw tpipe::invalid_argument(me + "parts::samples and parts::loss must be set");
        if (p_.unit_costs.size() != static_cast<std::size_t>(n))
            throw tpipe::invalid_argument(me + std::to_string(p_.unit_costs.size()) + " unit costs for " +
                                          std::to_string(n) + " modules; give one per module");
        if (p_.freezable < 0) p_.freezable = n - 1;
        if (p_.freezable >= n)
            throw tpipe::invalid_argument(me + "freezable " + std::to_string(p_.freezable) + " of " + std::to_string(n) +
                                          " modules; the last one must train (use 0.." + std::to_string(n - 1) + ")");
        std::unordered_set<const void*> seen;  // a tensor in two modules is the first one's (tied)
        for (std::size_t m = 0; m < p_.model->size(); ++m) {
            auto& own = params_.emplace_back();
            for (const auto& np : p_.model->ptr(m)->named_parameters()) {
                const torch::Tensor& t = np.value();
                const bool fresh = seen.insert(t.unsafeGetTensorImpl()).second;
                if (!t.is_contiguous() || (t.requires_grad() && t.scalar_type() != torch::kFloat))
                    throw tpipe::invalid_argument(me + "parameter '" + std::to_string(m) + "." + np.key() + "' is " +
                                                  describe(t) + (t.is_contiguous() ? "" : ", not contiguous") +
                                                  "; replicas receive contiguous parameters, float32 where they train");
                if (!fresh) continue;
                every_.push_back(t);
                if (t.requires_grad()) own.push_back(t);
            }
        }
        for (const auto& t : p_.model->buffers())
            if (!t.is_contiguous())
                throw tpipe::invalid_argument(me + "a buffer is " + describe(t) + ", not contiguous; replicas receive "
                                              "contiguous buffers");
        std::vector<torch::Tensor> all;
        for (const auto& ps : params_) all.insert(all.end(), ps.begin(), ps.end());
        opt_ = std::make_unique<torch::optim::AdamW>(all, p_.adamw);
        amsgrad_ = p_.adamw.amsgrad();
        auto& states = opt_->state();
        for (const auto& t : all) {  // the moments a new replica receives exist from the start
            auto s = std::make_unique<torch::optim::AdamWParamState>();
            s->step(0);
            s->exp_avg(torch::zeros_like(t));
            s->exp_avg_sq(torch::zeros_like(t));
            if (amsgrad_) s->max_exp_avg_sq(torch::zeros_like(t));
            states[detail::optimizer_state_key<std::decay_t<decltype(states)>>(t)] = std::move(s);
        }
        io_.source = [this](const tpipe::unit& u) {
            if (!input_.defined())
                throw tpipe::invalid_program("freezable_sequential: stage 0 ran but this step's begin_step had no "
                                             "frozen-prefix outputs for it");
            return rows_of(input_, u);
        };
        io_.output_grad = [this](const tpipe::unit& u, torch::Tensor&& outputs) {
            auto y = outputs.requires_grad_();  // a leaf: y.grad() is what the last stage's backward gets
            auto l = p_.loss(y, rows_of(targets_, u)) / static_cast<double>(targets_.numel());
            l.backward();
            loss_ += l.item<double>();
            return y.grad();
        };
    }

    // io_ points at this object: it stays where it was made (the drivers hold it by unique_ptr).
    freezable_sequential(const freezable_sequential&) = delete;
    freezable_sequential& operator=(const freezable_sequential&) = delete;

    // ---- tpipe::elastic::freezable_model ----------------------------------------------------
    std::vector<double> unit_costs() const { return p_.unit_costs; }
    int freezable_units() const { return p_.freezable; }

    uniform_pipeline<module_stage>& build(const elastic::stage_request& r)
    {
        if (r.frozen != frozen_)
            throw tpipe::invalid_argument("freezable_sequential::build: asked for " + std::to_string(r.frozen) +
                                          " frozen modules, but " + std::to_string(frozen_) + " are frozen; freeze() first");
        pipe_.reset();
        auto stages = cut(p_.model, std::vector<std::size_t>(r.cuts.begin(), r.cuts.end()));
        for (std::size_t s = 0; s < stages.size(); ++s)
            if (!r.here.empty() && !r.here[s]) stages[s] = module_stage::elsewhere(stages[s].name());
        return pipe_.emplace(std::move(stages));
    }
    const io_for<uniform_pipeline<module_stage>>& io() const { return io_; }

    void begin_step(std::span<const std::int64_t> ids, std::vector<frozen_output> frozen)
    {
        auto [inputs, targets] = p_.samples(ids);
        targets_ = std::move(targets);
        if (frozen_ == 0) input_ = std::move(inputs);
        else input_ = frozen.empty() ? torch::Tensor() : torch::cat(frozen, 0);  // empty: stage 0 runs elsewhere
        loss_ = 0;
        for (std::size_t m = static_cast<std::size_t>(frozen_); m < params_.size(); ++m)
            for (auto& t : params_[m])  // zeros, not none: every process sums every trainable gradient
                if (t.grad().defined()) t.mutable_grad().zero_();
                else t.mutable_grad() = torch::zeros_like(t);
    }
    double finish_step()
    {
        if (pipe_) sum_tied_gradients(*pipe_);  // a shared tensor's stages' gradients, in stage order
        return loss_;
    }

    void optimizer_step()
    {
        auto& states = opt_->state();
        using map = std::decay_t<decltype(states)>;
        for (std::size_t m = static_cast<std::size_t>(frozen_); m < params_.size(); ++m)
            for (const auto& t : params_[m])  // the step count a new replica received (trainable_state)
                static_cast<torch::optim::AdamWParamState&>(*states.at(detail::optimizer_state_key<map>(t))).step(steps_);
        opt_->step();
        ++steps_;
    }

    void freeze(int units)
    {
        if (units < frozen_ || units > p_.freezable)
            throw tpipe::invalid_argument("freezable_sequential::freeze(" + std::to_string(units) + "): " +
                                          std::to_string(frozen_) + " modules are frozen and " +
                                          std::to_string(p_.freezable) + " may freeze; the count only grows, up to that");
        auto& states = opt_->state();
        using map = std::decay_t<decltype(states)>;
        pipe_.reset();  // its stages list the parameters that train
        for (auto m = static_cast<std::size_t>(frozen_); m < static_cast<std::size_t>(units); ++m)
            for (auto& t : params_[m]) {
                t.requires_grad_(false);
                t.mutable_grad() = torch::Tensor();  // AdamW skips a parameter without a gradient
                states.erase(detail::optimizer_state_key<map>(t));
            }
        frozen_ = units;
    }

    //! Every parameter and buffer (the frozen ones too: a new replica runs the frozen prefix),
    //! the trainable parameters' AdamW moments, then the step count.
    std::vector<std::span<std::byte>> trainable_state()
    {
        std::vector<std::span<std::byte>> out;
        auto bytes = [&](const torch::Tensor& t) {
            out.emplace_back(static_cast<std::byte*>(t.data_ptr()), t.nbytes());
        };
        for (const auto& t : every_) bytes(t);
        for (const auto& t : p_.model->buffers()) bytes(t);
        const auto& states = opt_->state();
        for (const auto& t : trainable()) {  // their moments (the parameters are among the above)
            const auto& s = static_cast<const torch::optim::AdamWParamState&>(
                *states.at(detail::optimizer_state_key<std::decay_t<decltype(states)>>(t)));
            bytes(s.exp_avg());
            bytes(s.exp_avg_sq());
            if (amsgrad_) bytes(s.max_exp_avg_sq());
        }
        out.push_back(std::as_writable_bytes(std::span<std::int64_t>(&steps_, 1)));
        return out;
    }

    //! Every trainable parameter's gradient, zeros where another process's stages ran.
    gradient_view trainable_gradients()
    {
        gradient_view g;
        for (auto& t : trainable()) {
            torch::Tensor& d = t.mutable_grad();
            if (!d.defined()) d = torch::zeros_like(t);
            g.f32.emplace_back(d.data_ptr<float>(), static_cast<std::size_t>(d.numel()));
        }
        return g;
    }

    frozen_output run_frozen(std::int64_t id, std::optional<frozen_output> from, int from_units, int to_units)
    {
        const torch::NoGradGuard no_grad;
        torch::Tensor x = from ? std::move(*from) : p_.samples(std::span<const std::int64_t>(&id, 1)).first;
        for (int m = from_units; m < to_units; ++m)
            x = (p_.model->begin() + m)->forward<torch::Tensor>(std::move(x));
        return x.contiguous();
    }

    // ---- beyond the concept ----------------------------------------------------------------
    torch::nn::Sequential& model() { return p_.model; }
    torch::optim::AdamW& optimizer() { return *opt_; }
    int frozen() const { return frozen_; }

private:
    std::vector<torch::Tensor> trainable()
    {
        std::vector<torch::Tensor> out;
        for (std::size_t m = static_cast<std::size_t>(frozen_); m < params_.size(); ++m)
            out.insert(out.end(), params_[m].begin(), params_[m].end());
        return out;
    }
    //! The unit's rows of t and, under token slices, its tokens.
    torch::Tensor rows_of(const torch::Tensor& t, const tpipe::unit& u) const
    {
        torch::Tensor r = t.slice(0, u.row_begin, u.row_end);
        if (p_.tokens > 0 && u.tokens() < p_.tokens) r = r.slice(1, u.token_begin, u.token_end);
        return r;
    }

    parts p_;
    std::vector<std::vector<torch::Tensor>> params_;  //!< per module: its parameters that train until frozen
    std::vector<torch::Tensor> every_;                //!< every parameter once (a shared one where it first appears)
    std::unique_ptr<torch::optim::AdamW> opt_;
    bool amsgrad_ = false;
    std::int64_t steps_ = 0;  //!< optimizer steps taken
    int frozen_ = 0;
    std::optional<uniform_pipeline<module_stage>> pipe_;
    io_for<uniform_pipeline<module_stage>> io_;
    torch::Tensor input_, targets_;  //!< this step's stage-0 input (ids or frozen outputs) and targets
    double loss_ = 0;
};
static_assert(elastic::process_freezable_model<freezable_sequential>);

} // namespace tpipe::libtorch
