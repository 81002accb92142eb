// The CUDA GPT's model code (gpt_cuda/basic_model.hpp) on the host backend equals the CPU GPT:
// loss and every gradient of a step, unsliced, token-sliced and rows x tokens across two parts,
// and AdamW steps. This runs the device model's whole orchestration on the CPU — the buffers and
// K/V caches, the attention's batched-GEMM strides, the row-major to column-major operand mapping
// cuBLAS gets, the loss accumulation, the optimizer — everything but the CUDA launches and cuBLAS
// itself, which wait for a GPU (tests/gpt_cuda/gpu_model.cpp).
#include <catch2/catch.hpp>

#include <utility>

#include "model_checks.hpp"

namespace {

using namespace gpt_cuda_test;
using backend = gpt::cuda::host_backend;
using parameters = gpt::cuda::basic_parameters<backend>;
using part = gpt::cuda::basic_part<backend>;

constexpr double tol = 1e-5;  // float on both sides, different summation orders


} // namespace

TEST_CASE("host backend: the CUDA model's loss and every gradient equal the CPU GPT's, one unit", "[gpt_cuda][model]")
{
    host_rig rig;
    check_one_unit(rig, tol);
}

TEST_CASE("host backend: token-sliced and rows x tokens units through two parts equal the unsliced CPU step",
          "[gpt_cuda][model]")
{
    host_rig rig;
    check_sliced(rig, tol);
}

TEST_CASE("host backend: AdamW steps track the CPU model's losses, gradient norms and weights", "[gpt_cuda][model]")
{
    host_rig rig;
    check_adamw(rig, tol);
}

TEST_CASE("host backend: the part refuses units out of causal order, bad tokens and wrong activations",
          "[gpt_cuda][model]")
{
    const auto cfg = test_config(true);
    gpt::parameters<float> cpu(cfg);
    cpu.init(1);
    const auto b = gpt_test::random_batch(cfg, 2, cfg.seq_len, 3);
    parameters dev(cpu, {}, 0);
    part p(dev, 0, cfg.layers, true, true, 0);
    using Catch::Matchers::Contains;
    CHECK_THROWS_WITH(p.forward({0, 0, 0, 2, 0, 8}, {}), Contains("before begin()"));
    p.begin(&b);
    CHECK_THROWS_WITH(p.forward({0, 1, 0, 2, 8, 16}, {}), Contains("microbatch 0 tokens [8,16) out of causal order"));
    p.forward({0, 0, 0, 2, 0, 8}, {});
    CHECK_THROWS_WITH(p.forward({0, 0, 0, 2, 0, 8}, {}), Contains("forwarded twice"));
    p.forward({0, 1, 0, 2, 8, 16}, {});
    CHECK_THROWS_WITH(p.backward({0, 0, 0, 2, 0, 8}, {}), Contains("out of reverse token order (expected a slice ending at 16)"));
    CHECK_THROWS_WITH(p.backward_weight({0, 1, 0, 2, 8, 16}), Contains("before its backward_input"));
    CHECK_THROWS_WITH(p.forward({1, 0, 0, 3, 0, 8}, {}), Contains("do not fit the batch 2 x 24"));

    auto bad = b;
    bad.targets[5] = cfg.vocab;
    CHECK_THROWS_WITH(p.begin(&bad), Contains("token id 40 outside the vocabulary [0, 40)"));

    part second(dev, 1, cfg.layers, false, true, 0);
    second.begin(&b);
    gpt::cuda::basic_activation<backend> wrong{2, 8, gpt::cuda::host_buffer(2 * 7 * 32 * sizeof(float))};
    CHECK_THROWS_WITH(second.forward({0, 0, 0, 2, 0, 8}, std::move(wrong)),
                      Contains("forward input of microbatch 0 tokens [0,8) has shape [2,8] and 1792 bytes; the unit "
                               "needs [2,8,32] values of 4 bytes"));
    CHECK_THROWS_AS(part(dev, 1, 3, false, true, 0), tpipe::invalid_argument);
}

// bf16 storage (activations, caches, the weights the GEMMs read; float master weights,
// gradients, statistics and sums), run on the host with the device's rounding, against the CPU
// GPT in float. bf16 keeps 8 significant bits: each stored value is off by up to 2^-9 relative,
// and a step stores every activation a few times on its way, so the gradients differ by about
// 1e-2 relative; the tolerance is 3e-2.
namespace {
constexpr double bf16_tol = 3e-2;
using gpt::cuda::bfloat16;
} // namespace

TEST_CASE("host backend, bf16 storage: the loss and every gradient are the CPU GPT's within bf16's precision",
          "[gpt_cuda][model][bf16]")
{
    host_rig rig;
    check_one_unit<bfloat16>(rig, bf16_tol);
    check_sliced<bfloat16>(rig, bf16_tol);
}

TEST_CASE("host backend, bf16 storage: AdamW steps track the CPU model", "[gpt_cuda][model][bf16]")
{
    host_rig rig;
    check_adamw<bfloat16>(rig, bf16_tol);
}
