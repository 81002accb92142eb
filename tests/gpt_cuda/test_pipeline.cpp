// The CUDA GPT's stages (gpt_cuda/basic_pipeline.hpp) on the host backend, run by tpipe::run on
// CPU threads under every schedule with microbatch, token and rows x tokens slicing: three AdamW
// steps give the losses and weights of the CPU GPT trained without a pipeline, within 1e-5. The
// same stage code runs on cuda::engine in tests/gpt_cuda/gpu_model.cpp (waiting for a GPU).
#include <catch2/catch.hpp>

#include <iostream>
#include <string>

#include <tpipe/exec/engine.hpp>
#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "common.hpp"
#include "gpt_cuda/basic_pipeline.hpp"
#include "gpt_cuda/host_backend.hpp"

namespace {
using namespace gpt_cuda_test;
using backend = gpt::cuda::host_backend;
} // namespace

TEST_CASE("host backend: pipelined on CPU threads equals the CPU GPT trained without a pipeline, every schedule",
          "[gpt_cuda][pipeline]")
{
    auto cfg = test_config(true);
    cfg.layers = 4;
    const auto ref = cpu_training(cfg);
    const tpipe::batch_shape shape{train_rows, cfg.seq_len};
    int ran = 0;
    for (const auto& name : tpipe::schedule_names()) {
        for (const auto& units : {tpipe::microbatch_slicer{4}.scheme(shape), tpipe::token_slicer{{10, 8, 6}}.scheme(shape),
                                  tpipe::grid_slicer{2, {12, 12}}.scheme(shape)}) {
            const int ranks = 2, stages = ranks * tpipe::stages_per_rank(name);
            tpipe::program prog;
            try {
                prog = tpipe::make_schedule(name).program(tpipe::topology{.ranks = ranks}, units);
            } catch (const tpipe::error& e) {
                std::cout << "[gpt_cuda][pipeline] " << name << " refused " << units.units() << " units: " << e.what() << "\n";
                continue;
            }
            INFO(name << ", " << stages << " stages, " << units.units() << " units");
            gpt::parameters<float> host(cfg);
            host.init(3);
            gpt::cuda::basic_parameters<backend> dev(host, {}, 0);
            gpt::cuda::basic_pipelined_model<backend> model(dev, stages, 0);
            gpt::cuda::basic_adamw<backend> opt(dev, {.lr = 1e-3}, 0);
            tpipe::cpu_engine eng(ranks);
            for (int i = 0; i < train_steps; ++i) {
                const double loss = model.step(train_batch(cfg, i), prog, eng);
                CHECK(std::abs(loss - ref.losses[static_cast<std::size_t>(i)]) <= 1e-5 * ref.losses[static_cast<std::size_t>(i)]);
                opt.step(0);
            }
            dev.download(host, 0);
            CHECK(gpt_test::rel_err(host.value, ref.weights) <= 1e-5);
            ++ran;
        }
    }
    std::cout << "[gpt_cuda][pipeline] " << ran << " schedule x slicer combinations ran\n";
    CHECK(ran >= 15);
}
