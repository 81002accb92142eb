// The launchers' host-side checks (the same code runs before every device launch): a tensor of
// the wrong shape, too small a buffer, a null pointer or memory of the wrong kind is refused with
// a tpipe::invalid_argument naming the kernel, the tensor and both shapes, before anything runs.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "gpt_cuda/serial.hpp"

namespace {

using gpt::cuda::host_view;
using gpt::cuda::memory;
using gpt::cuda::shape;
using gpt::cuda::tensor;

gpt::cuda::serial_executor ex;

//! Matches a tpipe::invalid_argument whose message contains `text`.
struct says : Catch::MatcherBase<tpipe::invalid_argument> {
    std::string text;
    explicit says(std::string t) : text(std::move(t)) {}
    bool match(const tpipe::invalid_argument& e) const override { return std::string(e.what()).find(text) != std::string::npos; }
    std::string describe() const override { return "says \"" + text + "\""; }
};

template <class T>
tensor<T> view(std::vector<T>& v, shape s)
{
    return host_view(v.data(), s, static_cast<std::int64_t>(v.size()));
}

} // namespace

TEST_CASE("a tensor of the wrong shape is refused naming the kernel, the tensor and both shapes",
          "[gpt_cuda][checks]")
{
    std::vector<float> x(12 * 8), g(8), b(8), y(12 * 8), mean(12), rstd(12), small(7);
    auto run = [&](tensor<float> gv, tensor<float> yv, tensor<float> meanv) {
        gpt::cuda::layernorm_forward(ex, view(x, {12, 8}), gv, view(b, {8}), 1e-5, yv, meanv, view(rstd, {12}));
    };
    CHECK_NOTHROW(run(view(g, {8}), view(y, {12, 8}), view(mean, {12})));
    CHECK_THROWS_MATCHES(run(view(g, {7}), view(y, {12, 8}), view(mean, {12})), tpipe::invalid_argument,
                         says("gpt::cuda::layernorm_forward: tensor g has shape [7], the kernel needs [8]"));
    CHECK_THROWS_MATCHES(run(view(g, {8}), view(y, {8, 12}), view(mean, {12})), tpipe::invalid_argument,
                         says("tensor y has shape [8, 12], the kernel needs [12, 8]"));
    // Too small a buffer behind a view whose shape is right.
    CHECK_THROWS_MATCHES(run(view(g, {8}), view(y, {12, 8}), host_view(small.data(), shape{12}, 7)),
                         tpipe::invalid_argument,
                         says("tensor mean has room for 7 values, its shape [12] needs 12"));
    // Null data.
    CHECK_THROWS_MATCHES(run(view(g, {8}), tensor<float>{nullptr, {12, 8}, -1, memory::unknown}, view(mean, {12})),
                         tpipe::invalid_argument, says("tensor y is null but has shape [12, 8]"));
    // Device memory handed to the host executor (and, in the CUDA build, host memory to the device's).
    CHECK_THROWS_MATCHES(run(view(g, {8}), tensor<float>{y.data(), {12, 8}, 96, memory::device}, view(mean, {12})),
                         tpipe::invalid_argument,
                         says("tensor y is in device memory; this executor runs on the host"));
    // Nothing was written by the refused calls before the first one: y holds the first call's result.
    const auto y_after = y;
    CHECK_THROWS(run(view(g, {8}), view(y, {12, 9}), view(mean, {12})));
    CHECK(y == y_after);
}

TEST_CASE("every launcher checks the shapes that tie its tensors together", "[gpt_cuda][checks]")
{
    std::vector<float> a(64), b(64), c(64), probs(2 * 3 * 7);
    std::vector<std::int32_t> tokens(12);
    std::vector<double> loss(4);
    using tpipe::invalid_argument;
    CHECK_THROWS_MATCHES(gpt::cuda::bias_gelu_forward(ex, view(a, {5}), view(b, {4, 4}), view(c, {4, 4})),
                         invalid_argument, says("bias_gelu_forward: tensor bias has shape [5], the kernel needs [4]"));
    CHECK_THROWS_MATCHES(gpt::cuda::gelu_backward(ex, view(a, {4, 4}), view(b, {16})), invalid_argument,
                         says("gelu_backward: tensor g has shape [16], the kernel needs [4, 4]"));
    CHECK_THROWS_MATCHES(gpt::cuda::softmax_cross_entropy(ex, view(tokens, {3}), 1.0f, view(a, {4, 16}),
                                                          view(loss, {4})),
                         invalid_argument, says("softmax_cross_entropy: tensor targets has shape [3], the kernel needs [4]"));
    // Attention probabilities must be [rows*heads, s, t0 + s]: here t0 = 3 needs width 6, not 7.
    CHECK_THROWS_MATCHES(gpt::cuda::causal_softmax_forward(ex, 3, 1.0f, view(probs, {2, 3, 7})), invalid_argument,
                         says("causal_softmax_forward: tensor p has shape [2, 3, 7], the kernel needs [2, 3, 6]"));
    CHECK_NOTHROW(gpt::cuda::causal_softmax_forward(ex, 4, 1.0f, view(probs, {2, 3, 7})));
    CHECK_THROWS_MATCHES(gpt::cuda::causal_softmax_forward(ex, -1, 1.0f, view(probs, {2, 3, 7})), invalid_argument,
                         says("t0 is -1, must be >= 0"));
    // A slice that does not fit the cache.
    std::vector<float> qkv(4 * 3 * 2), k(2 * 3 * 2), v(2 * 3 * 2);
    CHECK_THROWS_MATCHES(gpt::cuda::kv_cache_copy(ex, 2, true, view(qkv, {4, 6}), view(k, {2, 3, 2}), view(v, {2, 3, 2})),
                         invalid_argument, says("qkv [4, 6] is not a slice of the cache [2, 3, 2] at token 2"));
    CHECK_NOTHROW(gpt::cuda::kv_cache_copy(ex, 1, true, view(qkv, {4, 6}), view(k, {2, 3, 2}), view(v, {2, 3, 2})));
    // A unit outside the batch, and an activation of the wrong length for the unit.
    std::vector<std::int32_t> inputs(2 * 6, 0);
    std::vector<float> wte(5 * 4), wpe(6 * 4), x(4 * 4);
    CHECK_THROWS_MATCHES(gpt::cuda::embedding_forward(ex, {1, 2, 0, 2}, view(inputs, {2, 6}), view(wte, {5, 4}),
                                                      view(wpe, {6, 4}), view(x, {4, 4})),
                         invalid_argument, says("embedding_forward: unit rows [1, 3) tokens [0, 2) do not fit the batch [2, 6]"));
    CHECK_THROWS_MATCHES(gpt::cuda::embedding_forward(ex, {0, 2, 0, 3}, view(inputs, {2, 6}), view(wte, {5, 4}),
                                                      view(wpe, {6, 4}), view(x, {4, 4})),
                         invalid_argument, says("the unit has 6 tokens, the activation 4 rows"));
    CHECK_NOTHROW(gpt::cuda::embedding_forward(ex, {0, 2, 0, 2}, view(inputs, {2, 6}), view(wte, {5, 4}),
                                               view(wpe, {6, 4}), view(x, {4, 4})));
    std::vector<unsigned char> decay(16);
    std::vector<double> sum_sq{0.0};
    CHECK_THROWS_MATCHES(gpt::cuda::adamw_update(ex, {}, view(sum_sq, {1}), view(a, {16}), view(decay, {16}),
                                                 view(b, {16}), view(c, {15}), view(c, {16})),
                         invalid_argument, says("adamw_update: tensor m has shape [15], the kernel needs [16]"));
}
