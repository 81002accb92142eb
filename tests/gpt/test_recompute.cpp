// Activation recomputation (part::set_recompute): each unit keeps only its input to the part and
// recomputes the part's forward in its backward, with the K/V cache of earlier tokens kept. The
// training equals the training without recomputation bitwise (losses, gradient norms, final
// weights) for microbatch and token slicings, fused and split backward (ZB-H1), 1-4 stages.
#include <catch2/catch.hpp>

#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "common.hpp"
#include "gpt/pipeline.hpp"

namespace {

struct outcome {
    std::vector<double> losses, norms;
    std::vector<float> weights;
};

outcome train(const gpt::config& cfg, int ranks, const tpipe::program& prog, bool recompute)
{
    outcome r;
    gpt::parameters<float> p(cfg);
    p.init(11);
    gpt::adamw<float> opt(p, {.lr = 3e-3, .max_grad_norm = 0.05});
    gpt::pipelined_model<float> model(p, prog.stages());
    model.set_recompute(recompute);
    tpipe::cpu_engine eng(ranks);
    for (int s = 0; s < 3; ++s) {
        const auto b = gpt_test::random_batch(cfg, 4, cfg.seq_len, 70 + static_cast<std::uint64_t>(s));
        r.losses.push_back(model.step(b, prog, eng));
        opt.step(p);
        r.norms.push_back(opt.last_grad_norm());
    }
    r.weights = p.value;
    return r;
}

} // namespace

TEST_CASE("activation recomputation trains bitwise as keeping the activations", "[gpt][recompute]")
{
    gpt::config cfg;
    cfg.vocab = 32;
    cfg.d_model = 16;
    cfg.heads = 2;
    cfg.layers = 4;
    cfg.seq_len = 16;
    const tpipe::batch_shape shape{4, cfg.seq_len};
    int ran = 0;
    for (const bool tied : {true, false}) {
        cfg.tied = tied;
        for (const int ranks : {1, 2, 4}) {
            for (const std::string sched : {"1f1b", "zb-h1", "terapipe-1f1b", "gpipe"}) {
                for (const std::string slicer : {"microbatch", "tokens", "grid"}) {
                    const auto units = slicer == "microbatch" ? tpipe::microbatch_slicer{4}.scheme(shape)
                                       : slicer == "tokens"   ? tpipe::token_slicer{{6, 4, 3, 2, 1}}.scheme(shape)
                                                              : tpipe::grid_slicer{2, {8, 5, 3}}.scheme(shape);
                    tpipe::program prog;
                    try {
                        prog = tpipe::make_schedule(sched).program(tpipe::topology{.ranks = ranks}, units);
                    } catch (const tpipe::error&) {
                        continue;  // e.g. a schedule of whole microbatches given token slices
                    }
                    INFO((tied ? "tied" : "untied") << ", " << ranks << " rank(s), " << sched << ", " << slicer);
                    const auto kept = train(cfg, ranks, prog, false);
                    const auto again = train(cfg, ranks, prog, true);
                    CHECK(kept.losses == again.losses);
                    CHECK(kept.norms == again.norms);
                    CHECK(kept.weights == again.weights);
                    ++ran;
                }
            }
        }
    }
    CHECK(ran >= 30);
}

TEST_CASE("a recomputing part keeps no per-layer activations between forward and backward", "[gpt][recompute]")
{
    // Forward every unit of a microbatch, then backward: bitwise the gradients of a part that
    // keeps its activations, with the forward of each token slice attending to the kept K/V.
    auto cfg = gpt_test::tiny_config(false);
    gpt::parameters<float> a(cfg), b(cfg);
    a.init(2);
    b.init(2);
    const auto batch = gpt_test::random_batch(cfg, 2, cfg.seq_len, 5);
    const auto units = tpipe::token_slicer{{2, 3, 1}}.scheme(tpipe::batch_shape{2, cfg.seq_len});
    gpt::part<float> keep(a, 0, cfg.layers, true, true), again(b, 0, cfg.layers, true, true);
    again.set_recompute(true);
    CHECK(again.recompute());
    const double la = gpt::run_in_order<float>({&keep}, units, batch);
    const double lb = gpt::run_in_order<float>({&again}, units, batch);
    CHECK(la == lb);
    CHECK(a.grad == b.grad);
}
