#pragma once
// Shared by the CUDA GPT's host tests and GPU tests: the model they use, the CPU reference they
// compare with, and the per-tensor gradient comparison.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "../gpt/common.hpp"

namespace gpt_cuda_test {

inline gpt::config test_config(bool tied)
{
    gpt::config c;
    c.vocab = 40;
    c.d_model = 32;
    c.heads = 4;
    c.layers = 2;
    c.seq_len = 24;
    c.tied = tied;
    return c;
}

//! Every tensor's gradient within `tol` relative. The attention's key bias has a true gradient of
//! exactly zero (softmax ignores a shift shared by every key): its computed value is rounding
//! noise on both sides, so only its query and value thirds are compared (its key third must be
//! finite).
inline void check_gradients(const gpt::parameters<float>& got, const gpt::parameters<float>& want, double tol)
{
    const std::int64_t d = want.cfg.d_model;
    for (const auto& t : want.lay.tensors) {
        INFO(t.name);
        const float* g = got.grad.data() + t.offset;
        const float* w = want.grad.data() + t.offset;
        if (t.name.find("b_qkv") != std::string::npos) {
            CHECK(gpt_test::rel_err(g, w, d) <= tol);
            CHECK(gpt_test::rel_err(g + 2 * d, w + 2 * d, d) <= tol);
            for (std::int64_t i = d; i < 2 * d; ++i) CHECK(std::isfinite(g[i]));
            continue;
        }
        CHECK(gpt_test::rel_err(g, w, t.size()) <= tol);
    }
}

//! The CPU model trained `steps` AdamW steps on batches of `rows` rows: each step's loss and the
//! gradient norms the optimizer saw, and the final weights.
struct reference {
    std::vector<double> losses, grad_norms;
    std::vector<float> weights;
};
constexpr int train_rows = 4, train_steps = 3;
inline gpt::batch train_batch(const gpt::config& cfg, int step)
{
    return gpt_test::random_batch(cfg, train_rows, cfg.seq_len, 100 + static_cast<std::uint64_t>(step));
}
inline reference cpu_training(const gpt::config& cfg)
{
    reference r;
    gpt::parameters<float> p(cfg);
    p.init(3);
    gpt::adamw<float> opt(p, {.lr = 1e-3});
    for (int s = 0; s < train_steps; ++s) {
        r.losses.push_back(gpt::full_step(p, train_batch(cfg, s)));
        opt.step(p);
        r.grad_norms.push_back(opt.last_grad_norm());
    }
    r.weights = p.value;
    return r;
}

} // namespace gpt_cuda_test
