#pragma once
// A split backward over one autograd graph in which every node runs once: the input half
// computes the input gradients and keeps, at the cut, the gradients the weight half starts
// from; the weight half computes the parameters' gradients from there. Together they cost one
// backward, as a hand-written split does (PyTorch's stage_backward_input/_weight do the same in
// Python).
//
// The cut. A node "depends on the input" when an input leaf lies below it; the input half runs
// exactly those nodes. Walking up from a parameter, the first such node met (an addmm whose
// other operand is an activation, a layer norm) is where the parameter's gradient leaves the
// input half: the input half records that node's incoming gradients (the engine's captures, no
// hook) without computing its parameter side, and the weight half runs it again from the
// recorded gradients towards the parameters only. A parameter that reaches an output without
// meeting such a node (a first stage, whose input is token ids) takes that output's gradient
// as its start. Parameters that share a start are computed in one engine call; calls never
// share a node, so no gradient is counted twice. (A weight used at two depths is the
// exception, computed from the outputs; see input_half.)
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <unordered_map>
#include <utility>
#include <vector>

#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>

namespace tpipe::libtorch::detail {

class split_backward {
public:
    using tensors = std::vector<torch::Tensor>;
    using node_ptr = decltype(torch::autograd::Edge::function);  // shared_ptr in libtorch 1.x, intrusive_ptr in 2.x

    //! The input half: the gradients of `inputs` (leaves; undefined where no gradient reaches),
    //! from `roots` with `grads`; keeps the graph and the cut for weight_half(`params`' order).
    tensors input_half(tensors roots, tensors grads, const tensors& inputs, const tensors& params)
    {
        roots_.clear();
        grads_.clear();
        for (std::size_t r = 0; r < roots.size(); ++r)
            if (roots[r].requires_grad()) {  // an output without a gradient edge carries nothing back
                roots_.push_back(std::move(roots[r]));
                grads_.push_back(std::move(grads[r]));
            }
        params_ = params.size();
        started_ = true;
        calls_.clear();
        if (roots_.empty()) return tensors(inputs.size());
        const graph g(roots_);
        const std::vector<int> input_at = accumulators(g, inputs);
        const std::vector<char> input_side = g.above(input_at);  // what the input half runs

        // Each parameter's starts: walking up from it, the input-side nodes where it stops, and
        // the outputs it reaches without meeting one.
        std::vector<std::vector<int>> outputs_at(g.size());
        for (std::size_t r = 0; r < roots_.size(); ++r)
            if (int n = g.find(g.root_edges[r].function.get()); n >= 0 && !input_side[n]) outputs_at[n].push_back(int(r));
        std::vector<start> starts;
        std::vector<int> node_start(g.size(), -1), root_start(roots_.size(), -1);
        auto start_of = [&](std::vector<int>& at, int i, start s) {
            if (at[i] < 0) at[i] = int(starts.size()), starts.push_back(s);
            return at[i];
        };
        std::vector<std::vector<int>> starts_of(params.size());
        std::vector<int> seen(g.size(), -1);
        const std::vector<int> param_at = accumulators(g, params);
        for (std::size_t p = 0; p < params.size(); ++p) {
            if (param_at[p] < 0) continue;  // not reached: no gradient
            std::vector<int> todo{param_at[p]};
            seen[param_at[p]] = int(p);
            while (!todo.empty()) {
                const int n = todo.back();
                todo.pop_back();
                if (input_side[n]) {
                    starts_of[p].push_back(start_of(node_start, n, {.node = n}));
                    continue;
                }
                for (int r : outputs_at[n]) starts_of[p].push_back(start_of(root_start, r, {.root = r}));
                for (int up : g.parents[n])
                    if (seen[up] != int(p)) seen[up] = int(p), todo.push_back(up);
            }
        }

        // The input half, recording the incoming gradients of every start node.
        torch::autograd::edge_list wanted;
        for (int n : input_at)
            if (n >= 0) wanted.emplace_back(g.nodes[n], 0);
        for (start& s : starts)
            if (s.node >= 0) {
                s.first = wanted.size();
                for (std::uint32_t k = 0; k < g.nodes[s.node]->num_inputs(); ++k) wanted.emplace_back(g.nodes[s.node], k);
                s.end = wanted.size();
            }
        tensors got;  // (an engine call with nothing wanted would accumulate into every leaf)
        if (!wanted.empty())
            got = torch::autograd::Engine::get_default_engine().execute(
                g.root_edges, grads_, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, wanted);

        // Parameters that share a start go in one call (a union-find over the starts).
        std::vector<int> parent(starts.size());
        std::iota(parent.begin(), parent.end(), 0);
        auto top = [&](int s) {
            while (parent[s] != s) s = parent[s] = parent[parent[s]];
            return s;
        };
        for (const auto& ss : starts_of)
            for (std::size_t i = 1; i < ss.size(); ++i) parent[top(ss[i])] = top(ss[0]);
        std::vector<int> call_of(starts.size(), -1);
        for (std::size_t i = 0; i < starts.size(); ++i) {
            int& c = call_of[top(int(i))];
            if (c < 0) c = int(calls_.size()), calls_.emplace_back();
            call& k = calls_[c];
            if (const start& s = starts[i]; s.root >= 0) {
                if (grads_[s.root].defined()) k.from.push_back(g.root_edges[s.root]), k.grads.push_back(grads_[s.root]);
            } else {
                for (std::size_t w = s.first; w < s.end; ++w)
                    if (got[w].defined()) k.from.push_back(wanted[w]), k.grads.push_back(std::move(got[w]));
            }
        }
        for (std::size_t p = 0; p < params.size(); ++p)
            if (!starts_of[p].empty()) {
                call& k = calls_[call_of[top(starts_of[p][0])]];
                k.params.push_back(p);
                k.to.emplace_back(g.nodes[param_at[p]], 0);
            }

        // A start node below another of the same call would get its gradient twice (recorded,
        // and again from the start above). Such a call (a weight used at two depths, as in a
        // model that shares layers) begins at the outputs instead: exact, at the cost of
        // walking its activation gradients again.
        std::vector<int> owner(g.size(), -1), nodes_in(calls_.size(), 0);
        for (std::size_t i = 0; i < starts.size(); ++i)
            if (starts[i].node >= 0) owner[starts[i].node] = call_of[top(int(i))], ++nodes_in[owner[starts[i].node]];
        std::vector<int> seen_from(g.size(), -1);
        for (std::size_t i = 0; i < starts.size(); ++i) {
            const int n = starts[i].node, c = n >= 0 ? owner[n] : -1;
            if (c < 0 || nodes_in[c] < 2 || calls_[c].nested) continue;
            std::vector<int> todo(g.children[n]);
            while (!todo.empty() && !calls_[c].nested) {
                const int m = todo.back();
                todo.pop_back();
                if (!input_side[m] || seen_from[m] == int(i)) continue;
                seen_from[m] = int(i);
                if (owner[m] == c) calls_[c].nested = true;
                todo.insert(todo.end(), g.children[m].begin(), g.children[m].end());
            }
        }
        for (call& k : calls_)
            if (k.nested) k.from = g.root_edges, k.grads = grads_;

        tensors input_grads(inputs.size());
        for (std::size_t i = 0, w = 0; i < inputs.size(); ++i)
            if (input_at[i] >= 0) input_grads[i] = std::move(got[w++]);
        return input_grads;
    }

    //! The weight half: the parameters' gradients, in input_half's order (undefined where none
    //! reaches). Releases the graph.
    tensors weight_half()
    {
        tensors out(params_);
        for (call& k : calls_) {
            if (k.from.empty() || k.to.empty()) continue;
            tensors g = torch::autograd::Engine::get_default_engine().execute(
                k.from, k.grads, /*keep_graph=*/true, /*create_graph=*/false, /*accumulate_grad=*/false, k.to);
            for (std::size_t i = 0; i < k.params.size(); ++i) out[k.params[i]] = std::move(g[i]);
        }
        calls_.clear();
        roots_.clear();
        grads_.clear();
        started_ = false;
        return out;
    }

    bool started() const noexcept { return started_; }

private:
    //! The graph below the roots: its nodes, for each the nodes that use its output (parents)
    //! and those its gradient flows to (children).
    struct graph {
        torch::autograd::edge_list root_edges;
        std::vector<node_ptr> nodes;
        std::vector<std::vector<int>> parents, children;
        std::unordered_map<const torch::autograd::Node*, int> index;

        explicit graph(const tensors& roots)
        {
            std::vector<int> todo;
            auto add = [&](const node_ptr& n) {
                auto [it, fresh] = index.try_emplace(n.get(), int(nodes.size()));
                if (fresh) nodes.push_back(n), parents.emplace_back(), children.emplace_back(), todo.push_back(it->second);
                return it->second;
            };
            for (const auto& r : roots) {
                root_edges.push_back(torch::autograd::impl::gradient_edge(r));
                if (root_edges.back().function) add(root_edges.back().function);
            }
            while (!todo.empty()) {
                const int n = todo.back();
                todo.pop_back();
                for (const auto& e : nodes[n]->next_edges())
                    if (e.function) {
                        const int child = add(e.function);
                        parents[child].push_back(n);
                        children[n].push_back(child);
                    }
            }
        }
        std::size_t size() const { return nodes.size(); }
        int find(const torch::autograd::Node* n) const
        {
            auto it = index.find(n);
            return it == index.end() ? -1 : it->second;
        }
        //! Marks `from` and every node above them.
        std::vector<char> above(const std::vector<int>& from) const
        {
            std::vector<char> mark(size(), 0);
            std::vector<int> todo;
            for (int n : from)
                if (n >= 0 && !mark[n]) mark[n] = 1, todo.push_back(n);
            while (!todo.empty()) {
                const int n = todo.back();
                todo.pop_back();
                for (int up : parents[n])
                    if (!mark[up]) mark[up] = 1, todo.push_back(up);
            }
            return mark;
        }
    };

    //! Where a weight-half call begins: an input-side node (its recorded incoming gradients,
    //! wanted[first, end)) or an output's edge (with its given gradient).
    struct start {
        int node = -1, root = -1;
        std::size_t first = 0, end = 0;
    };

    struct call {
        torch::autograd::edge_list from, to;
        tensors grads;
        std::vector<std::size_t> params;
        bool nested = false;  //!< begins at the outputs (see input_half)
    };

    //! Each leaf's gradient accumulator in the graph (-1: not there).
    static std::vector<int> accumulators(const graph& g, const tensors& leaves)
    {
        std::vector<int> out;
        for (const auto& t : leaves) {
            auto acc = torch::autograd::impl::try_get_grad_accumulator(t);
            out.push_back(acc ? g.find(acc.get()) : -1);
        }
        return out;
    }

    tensors roots_, grads_;  //!< keep the graph alive until the weight half
    std::vector<call> calls_;
    std::size_t params_ = 0;
    bool started_ = false;
};

} // namespace tpipe::libtorch::detail
