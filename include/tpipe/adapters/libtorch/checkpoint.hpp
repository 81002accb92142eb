#pragma once
// A libtorch pipeline's training state in tpipe's checkpoint format (tpipe/state): each stage's
// parameters under their model names ("param/3.mlp.weight": the names cut() and
// module_stage::of() give) and AdamW's moments of each ("adamw.m/...", "adamw.v/...",
// "adamw.vmax/..." with amsgrad) as f32 ranges; AdamW's hyper-parameters and step count in the
// manifest's optimizer section (adamw_json).
//
// Why tpipe's format and not torch::save: a checkpoint is read by tensor name and element range,
// so a resume with other cuts or another number of stages or processes reads the tensors it
// holds wherever they were written; every shard is checksummed and the whole is committed by one
// rename (state/checkpoint_writer.hpp); and it is the reference GPT's format, readable without
// libtorch. A save writes each stage's shard from the process that runs it:
//
//   tpipe::state::shard_snapshot shard("stage-" + std::to_string(i) + ".bin");
//   tpipe::libtorch::add_stage(shard, pipe.stage(i), optimizer);
//   manifest.optimizer = tpipe::libtorch::adamw_json(optimizer);
//   writer.begin(std::move(manifest), {std::move(shard)});
//
// and a resume loads every stage it runs, before the optimizer's first step:
//
//   const tpipe::state::checkpoint_reader in(dir);       // checksums checked here
//   tpipe::libtorch::load_stage(in, pipe.stage(i), optimizer);  // AdamW's settings checked
#include <cstdint>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include "tpipe/adapters/libtorch/module_stage.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/state/checkpoint_reader.hpp"
#include "tpipe/state/errors.hpp"
#include "tpipe/state/manifest.hpp"
#include "tpipe/state/manifest_field.hpp"
#include "tpipe/state/shard_snapshot.hpp"

namespace tpipe::libtorch {

namespace detail {

//! The key of parameter `p` in an optimizer's state map: libtorch 1.x keys it by the text of
//! the TensorImpl's address, 2.x by the address itself.
template <class Map>
typename Map::key_type optimizer_state_key(const torch::Tensor& p)
{
    using key = typename Map::key_type;
    if constexpr (std::is_same_v<key, std::string>) {
        std::ostringstream o;
        o << static_cast<const void*>(p.unsafeGetTensorImpl());
        return o.str();
    } else {
        return static_cast<key>(p.unsafeGetTensorImpl());
    }
}

inline const torch::optim::AdamWParamState* adamw_state(const torch::optim::AdamW& opt, const torch::Tensor& p)
{
    const auto& states = opt.state();
    const auto it = states.find(optimizer_state_key<std::decay_t<decltype(states)>>(p));
    return it == states.end() ? nullptr : static_cast<const torch::optim::AdamWParamState*>(it->second.get());
}

inline std::vector<std::int64_t> shape_of(const torch::Tensor& t)
{
    return std::vector<std::int64_t>(t.sizes().begin(), t.sizes().end());
}

//! `t` as float elements (a contiguous copy when it is not contiguous; kept alive by `keep`).
inline std::span<const float> floats(const torch::Tensor& t, torch::Tensor& keep)
{
    keep = t.detach().contiguous();
    return {keep.data_ptr<float>(), static_cast<std::size_t>(keep.numel())};
}

inline std::string stage_parameter(const module_stage& s, std::size_t i)
{
    const std::string& key = s.parameter_key(i);
    if (key.empty())
        throw tpipe::invalid_argument("checkpoint: " + s.parameter_name(i) + " of " + s.name() +
                                      " has no name to be saved under; build the stage with cut() or "
                                      "module_stage::of(), or name it with name_parameters()");
    if (s.parameters()[i].scalar_type() != torch::kFloat)
        throw tpipe::invalid_argument("checkpoint: " + s.parameter_name(i) + " of " + s.name() + " is " +
                                      describe(s.parameters()[i]) + "; the libtorch checkpoint holds float32 "
                                      "parameters");
    return key;
}

inline const torch::optim::AdamWOptions& group_options(const torch::optim::OptimizerParamGroup& g)
{
    return static_cast<const torch::optim::AdamWOptions&>(g.options());
}

//! Each parameter group's hyper-parameters.
inline json::array adamw_groups(const torch::optim::AdamW& opt)
{
    json::array groups;
    for (const auto& g : opt.param_groups()) {
        const auto& o = group_options(g);
        groups.push_back(json::object{{"lr", o.lr()},
                                      {"beta1", std::get<0>(o.betas())},
                                      {"beta2", std::get<1>(o.betas())},
                                      {"eps", o.eps()},
                                      {"weight_decay", o.weight_decay()},
                                      {"amsgrad", o.amsgrad()},
                                      {"parameters", static_cast<std::int64_t>(g.params().size())}});
    }
    return groups;
}

} // namespace detail

//! The manifest's optimizer section for `opt`: its kind, each parameter group's hyper-parameters
//! and the step count (the same for every parameter that has stepped; a mix is refused).
inline json::value adamw_json(const torch::optim::AdamW& opt)
{
    std::int64_t steps = -1;
    for (const auto& g : opt.param_groups()) {
        for (const auto& p : g.params()) {
            const auto* st = detail::adamw_state(opt, p);
            const std::int64_t s = st ? st->step() : 0;
            if (steps >= 0 && s != steps)
                throw tpipe::invalid_argument("adamw_json: the optimizer's parameters have taken different numbers of "
                                              "steps (" + std::to_string(steps) + " and " + std::to_string(s) +
                                              "); a checkpoint records one step count");
            steps = s;
        }
    }
    return json::object{{"kind", "adamw"}, {"groups", detail::adamw_groups(opt)}, {"step_count", std::max<std::int64_t>(steps, 0)}};
}

//! Adds the parameters of `stage` and their AdamW moments to `shard`. A parameter the optimizer
//! has not stepped yet is saved with zero moments (what AdamW starts from).
inline void add_stage(state::shard_snapshot& shard, const module_stage& stage, const torch::optim::AdamW& opt)
{
    const auto& ps = stage.parameters();
    std::size_t bytes = shard.bytes();
    for (const auto& p : ps) bytes += static_cast<std::size_t>(p.numel()) * sizeof(float) * 4;
    shard.reserve(bytes);
    const bool amsgrad = [&] {
        for (const auto& g : opt.param_groups())
            if (detail::group_options(g).amsgrad()) return true;
        return false;
    }();
    for (std::size_t i = 0; i < ps.size(); ++i) {
        const std::string name = detail::stage_parameter(stage, i);
        const auto shape = detail::shape_of(ps[i]);
        torch::Tensor keep;
        shard.add<float>("param/" + name, shape, 0, detail::floats(ps[i], keep));
        const auto* st = detail::adamw_state(opt, ps[i]);
        const torch::Tensor zeros = st ? torch::Tensor() : torch::zeros_like(ps[i]);
        shard.add<float>("adamw.m/" + name, shape, 0, detail::floats(st ? st->exp_avg() : zeros, keep));
        shard.add<float>("adamw.v/" + name, shape, 0, detail::floats(st ? st->exp_avg_sq() : zeros, keep));
        if (amsgrad)
            shard.add<float>("adamw.vmax/" + name, shape, 0,
                             detail::floats(st && st->max_exp_avg_sq().defined() ? st->max_exp_avg_sq() : zeros, keep));
    }
}

//! Checks the checkpoint's optimizer section against `opt` (as many groups, with the same betas,
//! eps, weight decay and amsgrad; not the learning rate, which a schedule changes, nor the
//! groups' sizes, since a process with stage-local optimizers holds only its stages' share) and
//! returns its step count. Throws state::incompatible_checkpoint naming each difference.
inline std::int64_t load_adamw(const state::checkpoint_reader& in, const torch::optim::AdamW& opt)
{
    const auto& saved = in.contents().optimizer;
    const std::string where = "checkpoint \"" + in.path() + "\"";
    if (!saved.is_object() || !saved.contains("kind") || saved.at("kind").as_string("kind") != "adamw" ||
        !saved.contains("groups"))
        throw state::incompatible_checkpoint(where + " holds no libtorch AdamW state (its optimizer section is " +
                                             json::dump(saved) + ")");
    const auto& a = saved.at("groups").as_array("groups");
    const json::array b = detail::adamw_groups(opt);
    if (a.size() != b.size())
        throw state::incompatible_checkpoint(where + " was saved with " + std::to_string(a.size()) +
                                             " AdamW parameter groups, this optimizer has " + std::to_string(b.size()));
    std::string diff;
    for (std::size_t g = 0; g < a.size(); ++g)
        for (const char* k : {"beta1", "beta2", "eps", "weight_decay", "amsgrad"}) {
            const std::string x = a[g].contains(k) ? json::dump(a[g].at(k)) : "(none)", y = json::dump(b[g].at(k));
            if (x != y) diff += (diff.empty() ? "" : ", ") + std::string("group ") + std::to_string(g) + " " + k + " " + x +
                                " (this optimizer: " + y + ")";
        }
    if (!diff.empty()) throw state::incompatible_checkpoint(where + " was saved with another AdamW: " + diff);
    try {
        return state::field::integer(saved, "optimizer", "step_count");
    } catch (const error& e) {
        throw state::corrupt_checkpoint(where + ": " + e.what());
    }
}

//! Loads the parameters of `stage` and their AdamW state from `in` (any sharding: each tensor is
//! read by name), before `opt` steps. Throws state::incompatible_checkpoint for a tensor that
//! is missing or has another shape.
inline void load_stage(const state::checkpoint_reader& in, module_stage& stage, torch::optim::AdamW& opt)
{
    const std::int64_t steps = load_adamw(in, opt);
    bool amsgrad = false;
    for (const auto& g : opt.param_groups()) amsgrad = amsgrad || detail::group_options(g).amsgrad();
    auto read = [&](const std::string& name, const torch::Tensor& like) {
        torch::Tensor t = torch::empty(like.sizes(), torch::kFloat);
        in.read_tensor<float>(name, detail::shape_of(like),
                              std::span<float>(t.data_ptr<float>(), static_cast<std::size_t>(t.numel())));
        return t.to(like.device());
    };
    auto& states = opt.state();
    using map = std::decay_t<decltype(states)>;
    const torch::NoGradGuard no_grad;
    const auto& ps = stage.parameters();
    for (std::size_t i = 0; i < ps.size(); ++i) {
        const std::string name = detail::stage_parameter(stage, i);
        torch::Tensor p = ps[i];
        p.copy_(read("param/" + name, p));
        if (steps == 0) continue;  // AdamW starts from zero moments itself
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(steps);
        st->exp_avg(read("adamw.m/" + name, p));
        st->exp_avg_sq(read("adamw.v/" + name, p));
        if (amsgrad) st->max_exp_avg_sq(read("adamw.vmax/" + name, p));
        states[detail::optimizer_state_key<map>(p)] = std::move(st);
    }
}

} // namespace tpipe::libtorch
