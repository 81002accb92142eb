#pragma once
// A Sequential cut into module_stages (cut), parameters shared between stages found and kept
// apart (tie), and their gradients added up after a run (sum_tied_gradients). Part of
// tpipe/adapters/libtorch.hpp.
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <torch/nn.h>

#include "tpipe/adapters/libtorch/module_stage.hpp"
#include "tpipe/adapters/libtorch/tensor_spec.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/exec/pipeline.hpp"

namespace tpipe::libtorch {

//! Finds the parameters that several stages hold (one tensor, e.g. a tied embedding and LM
//! head) and marks them tied in each of those stages, so that each stage keeps its gradient
//! apart and sum_tied_gradients adds them in stage order. Two different parameter tensors over
//! one storage are refused (autograd would keep two gradients for one set of weights). Also
//! gives every stage the names of all the pipeline's parameters, for its errors. cut() calls it;
//! call it for stages built one by one. Returns one line per tied parameter: "'0.token.weight':
//! stage 0 (...), stage 2 (...)".
inline std::vector<std::string> tie(std::vector<module_stage>& stages)
{
    struct holder {
        const void* impl;
        std::size_t stage, index;
    };
    std::map<const void*, std::vector<holder>> by_storage;
    auto book = std::make_shared<detail::parameter_book>();
    for (std::size_t s = 0; s < stages.size(); ++s) {
        const auto& ps = stages[s].parameters();
        for (std::size_t i = 0; i < ps.size(); ++i) {
            if (ps[i].storage().data())  // (an empty tensor has no storage to share)
                by_storage[ps[i].storage().data()].push_back({ps[i].unsafeGetTensorImpl(), s, i});
            book->emplace(ps[i].unsafeGetTensorImpl(), stages[s].parameter_name(i) + " of " + stages[s].name());
        }
    }
    std::vector<std::string> tied;
    for (const auto& [storage, hs] : by_storage) {
        if (hs.size() < 2) continue;
        const holder& a = hs.front();
        std::string line = stages[a.stage].parameter_name(a.index) + ":";
        for (const holder& h : hs) {
            if (h.impl != a.impl)
                throw tpipe::invalid_argument(
                    stages[a.stage].parameter_name(a.index) + " of " + stages[a.stage].name() + " and " +
                    stages[h.stage].parameter_name(h.index) + " of " + stages[h.stage].name() +
                    " are different tensors over the same storage; tie them by using one parameter tensor in both "
                    "modules (then tpipe sums their gradients), or give each its own storage");
            stages[h.stage].set_tied(h.index);
            line += (&h == &a ? " " : ", ") + stages[h.stage].name();
        }
        tied.push_back(std::move(line));
    }
    std::shared_ptr<const detail::parameter_book> shared = std::move(book);
    for (auto& s : stages) s.set_book(shared);
    return tied;
}

//! After a run: adds each stage's own gradients of its tied parameters into their .grad(), stage
//! by stage in order (so the sum is the same in every run). Call it after every run that
//! trains tied parameters, before the optimizer steps; the next run refuses to start otherwise.
inline void sum_tied_gradients(uniform_pipeline<module_stage>& pipe)
{
    for (std::size_t i = 0; i < pipe.size(); ++i) pipe.stage(i).add_tied_gradients();
}

//! A Sequential cut into stages: stage i runs modules [cuts[i], cuts[i+1]) (cuts[0] < ... <
//! cuts.back() = seq->size(); cuts[0] > 0 leaves a prefix out, e.g. a frozen one that runs
//! before the pipeline: freezable_sequential). What each stage takes is inferred (infer_input) unless `takes`
//! gives it (one spec per stage). Parameters shared by stages are tied (tie()).
inline std::vector<module_stage> cut(torch::nn::Sequential seq, const std::vector<std::size_t>& cuts,
                                     std::vector<tensor_spec> takes = {})
{
    const std::size_t n = seq->size();
    bool ok = cuts.size() >= 2 && cuts.back() == n;
    for (std::size_t i = 1; ok && i < cuts.size(); ++i) ok = cuts[i - 1] < cuts[i];
    if (!ok) {
        std::string got;
        for (auto c : cuts) got += (got.empty() ? "" : ", ") + std::to_string(c);
        throw tpipe::invalid_argument("libtorch::cut: cuts must rise strictly to the Sequential's " +
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
        std::vector<std::string> names;
        std::unordered_set<const void*> seen;  // a tensor registered twice in one stage counts once
        for (std::size_t m = cuts[i]; m < cuts[i + 1]; ++m) {
            range.push_back(*(seq->begin() + static_cast<std::ptrdiff_t>(m)));
            for (const auto& p : seq->ptr(m)->named_parameters())
                if (p.value().requires_grad() && seen.insert(p.value().unsafeGetTensorImpl()).second) {
                    params.push_back(p.value());
                    names.push_back(std::to_string(m) + "." + p.key());
                }
        }
        std::string name = "stage " + std::to_string(i) + " (modules [" + std::to_string(cuts[i]) + ", " +
                           std::to_string(cuts[i + 1]) + "), from " + seq->ptr(cuts[i])->name() + ")";
        auto fn = [range = std::move(range)](torch::Tensor x) mutable {
            for (auto& m : range) x = m.forward<torch::Tensor>(std::move(x));
            return x;
        };
        tensor_spec spec = takes.empty() ? infer_input(*seq->ptr(cuts[i])) : takes[i];
        out.emplace_back(std::move(fn), std::move(params), name, std::move(spec), previous);
        out.back().name_parameters(std::move(names));
        previous = name;
    }
    tie(out);
    return out;
}

} // namespace tpipe::libtorch
