#pragma once
// A tiny tensor-parallel stage for tests (Megatron's MLP without its nonlinearity, in integers so
// every run is exact): y = x + W2 (W1 x), W1 (h x n) split by rows over the t tensor ranks
// (column-parallel), W2 (n x h) split by columns (row-parallel). Tensor rank k holds rows/columns
// [k h/t, (k+1) h/t); its forward's partial W2_k (W1_k x) is summed over the tensor group, and so
// is its backward's partial W1_k^T (W2_k^T g). With no group (t = 1) it is the whole layer.
//
// The stage concept is synchronous: it sums through a tpipe::blocking_group, which runs the
// collective on a thread of its own while the compute blocks (each rank has its own loop here).
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "tpipe/comm/blocking_group.hpp"
#include "tpipe/core/unit.hpp"

namespace tp_test {

using vec = std::vector<std::int64_t>;
constexpr int width = 4, hidden = 12;

inline std::int64_t w1(int stage, int i, int j) { return (i * 7 + j * 3 + stage * 5) % 5 - 2; }
inline std::int64_t w2(int stage, int i, int j) { return (i * 3 + j * 5 + stage) % 5 - 2; }

template <class Comm>
struct mlp_stage {
    using input = vec;
    using output = vec;

    int stage = 0, tensor_rank = 0, tensor_ranks = 1;
    std::shared_ptr<tpipe::blocking_group<Comm>> group;  // the tensor group's sum; null: t = 1
    vec dw1, dw2;           // this rank's shares: rows of W1 (h/t x n), columns of W2 (n x h/t)
    std::map<int, std::pair<vec, vec>> saved;  // microbatch -> (x, W1_k x)

    mlp_stage(int s, int k, int t, Comm* g)
        : stage(s), tensor_rank(k), tensor_ranks(t), group(g ? std::make_shared<tpipe::blocking_group<Comm>>(*g) : nullptr), dw1(static_cast<std::size_t>(share() * width)),
          dw2(static_cast<std::size_t>(width * share()))
    {
    }
    int share() const { return hidden / tensor_ranks; }
    int row(int i) const { return tensor_rank * share() + i; }  // this rank's i-th hidden unit

    vec forward(const tpipe::unit& u, vec x)
    {
        vec h(static_cast<std::size_t>(share()), 0), y(static_cast<std::size_t>(width), 0);
        for (int i = 0; i < share(); ++i)
            for (int j = 0; j < width; ++j) h[i] += w1(stage, row(i), j) * x[j];
        for (int i = 0; i < width; ++i)
            for (int j = 0; j < share(); ++j) y[i] += w2(stage, i, row(j)) * h[j];
        sum_over_group(y);
        for (int i = 0; i < width; ++i) y[i] += x[i];
        saved[u.microbatch] = {std::move(x), std::move(h)};
        return y;
    }
    vec backward(const tpipe::unit& u, vec g)
    {
        auto [x, h] = std::move(saved.at(u.microbatch));
        saved.erase(u.microbatch);
        vec gh(static_cast<std::size_t>(share()), 0), dx(static_cast<std::size_t>(width), 0);
        for (int j = 0; j < share(); ++j)
            for (int i = 0; i < width; ++i) {
                gh[j] += w2(stage, i, row(j)) * g[i];
                dw2[static_cast<std::size_t>(i * share() + j)] += g[i] * h[j];
            }
        for (int i = 0; i < share(); ++i)
            for (int j = 0; j < width; ++j) {
                dx[j] += w1(stage, row(i), j) * gh[i];
                dw1[static_cast<std::size_t>(i * width + j)] += gh[i] * x[j];
            }
        sum_over_group(dx);
        for (int i = 0; i < width; ++i) dx[i] += g[i];
        return dx;
    }

private:
    void sum_over_group(vec& v)
    {
        if (group) group->all_reduce_sum(std::span<std::int64_t>(v));
    }
};

//! The first stage's input for microbatch m, and the loss gradient of an output (loss |y|^2 / 2).
inline vec source(int m) { return {m + 1, 2 - m, 3 * m - 1, 1}; }

} // namespace tp_test
