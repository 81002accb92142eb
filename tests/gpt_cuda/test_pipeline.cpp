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

#include "model_checks.hpp"

namespace {
using namespace gpt_cuda_test;
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
            host_rig rig;
            tpipe::cpu_engine eng(ranks);
            check_pipelined(rig, eng, cfg, stages, prog, ref, 1e-5);
            ++ran;
        }
    }
    std::cout << "[gpt_cuda][pipeline] " << ran << " schedule x slicer combinations ran\n";
    CHECK(ran >= 15);
}
