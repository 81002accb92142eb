// Stage-local state (gpt/stage_state.hpp): every stage holds, steps and clips only its own
// parameters, and the training equals the whole-model training under the same schedule and
// units bitwise (losses and final weights), tied and untied, for P = 1, 2, 4 stages.
#include <catch2/catch.hpp>

#include <tpipe/schedule/by_name.hpp>
#include <tpipe/slice/slicers.hpp>

#include "common.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/stage_state.hpp"

namespace {

gpt::config local_config(bool tied)
{
    gpt::config c;
    c.vocab = 32;
    c.d_model = 16;
    c.heads = 2;
    c.layers = 4;
    c.seq_len = 16;
    c.tied = tied;
    return c;
}

struct run_result {
    std::vector<double> losses, norms;
    std::vector<float> weights;
};

// max_grad_norm 0.05: the clip is active on every step, so the norm's bits reach the weights.
constexpr gpt::adamw_options opts{.lr = 3e-3, .max_grad_norm = 0.05};

run_result whole_model(const gpt::config& cfg, int stages, const tpipe::program& prog)
{
    run_result r;
    gpt::parameters<float> p(cfg);
    p.init(5);
    gpt::adamw<float> opt(p, opts);
    gpt::pipelined_model<float> model(p, stages);
    tpipe::cpu_engine eng(prog.ranks);
    for (int s = 0; s < 3; ++s) {
        const auto b = gpt_test::random_batch(cfg, 4, cfg.seq_len, 40 + static_cast<std::uint64_t>(s));
        r.losses.push_back(model.step(b, prog, eng));
        opt.step(p);
        r.norms.push_back(opt.last_grad_norm());
    }
    r.weights = p.value;
    return r;
}

run_result stage_local(const gpt::config& cfg, int stages, const tpipe::program& prog)
{
    run_result r;
    gpt::stage_states<float> st(cfg, stages, {}, {}, opts, 5);
    gpt::pipelined_model<float> model(cfg, st.pointers());
    tpipe::cpu_engine eng(prog.ranks);
    for (int s = 0; s < 3; ++s) {
        const auto b = gpt_test::random_batch(cfg, 4, cfg.seq_len, 40 + static_cast<std::uint64_t>(s));
        r.losses.push_back(model.step(b, prog, eng));
        st.step();
        r.norms.push_back(st.opt(0).last_grad_norm());
    }
    r.weights = st.whole(false);
    if (cfg.tied && stages > 1) {  // the last stage's head stays the first stage's embedding, bitwise
        const auto& first = st.params(0);
        const auto& last = st.params(stages - 1);
        const auto n = static_cast<std::ptrdiff_t>(cfg.vocab * cfg.d_model);
        CHECK(std::equal(first.value.begin() + first.lay.wte, first.value.begin() + first.lay.wte + n,
                         last.value.begin() + last.lay.head));
    }
    return r;
}

} // namespace

TEST_CASE("stage-local state trains bitwise as the whole model", "[gpt][stage_local]")
{
    for (const bool tied : {true, false}) {
        const auto cfg = local_config(tied);
        for (const int stages : {1, 2, 4}) {
            for (const std::string sched : {"1f1b", "zb-h1", "terapipe-1f1b"}) {
                const tpipe::batch_shape shape{4, cfg.seq_len};
                const auto units = sched == "terapipe-1f1b" ? tpipe::grid_slicer{2, {8, 5, 3}}.scheme(shape)
                                                            : tpipe::microbatch_slicer{4}.scheme(shape);
                const auto prog = tpipe::make_schedule(sched).program(tpipe::topology{.ranks = stages}, units);
                INFO((tied ? "tied" : "untied") << ", " << stages << " stage(s), " << sched);
                const auto a = whole_model(cfg, stages, prog);
                const auto b = stage_local(cfg, stages, prog);
                CHECK(a.losses == b.losses);
                CHECK(a.norms == b.norms);
                CHECK(a.norms.front() > opts.max_grad_norm);  // the clip acted
                CHECK(a.weights == b.weights);
            }
        }
    }
}

TEST_CASE("stage-local parameters hold only their stage and start as the whole model", "[gpt][stage_local]")
{
    const auto cfg = local_config(true);
    gpt::parameters<float> whole(cfg);
    whole.init(9);
    gpt::stage_states<float> st(cfg, 2, {}, {false, true}, {}, 9);
    CHECK_FALSE(st.holds(0));
    CHECK_THROWS_AS(st.params(0), std::invalid_argument);
    const auto& last = st.params(1);
    // Layers 2 and 3, the final LayerNorm and the tied head's copy of the embedding.
    const gpt::layout lay(cfg);
    const std::int64_t expect = (lay.blocks[3].end - lay.blocks[2].begin) + 2 * cfg.d_model +
                                static_cast<std::int64_t>(cfg.vocab) * cfg.d_model;
    CHECK(last.size() == expect);
    CHECK(st.held_parameters() == expect - static_cast<std::int64_t>(cfg.vocab) * cfg.d_model);
    for (const auto& t : last.lay.tensors)
        CHECK(std::equal(last.value.begin() + t.offset, last.value.begin() + t.offset + t.size(),
                         whole.value.begin() + t.global_offset));
    // A part needs what its state holds.
    CHECK_THROWS_AS(gpt::part<float>(st.params(1), 0, 2, false, true), std::logic_error);
    CHECK_THROWS_AS(gpt::part<float>(st.params(1), 2, 4, true, true), std::logic_error);
    CHECK_THROWS_AS(gpt::layout(cfg, gpt::holding{3, 5, false, true}), std::invalid_argument);
    CHECK_THROWS_AS(last.lay.frozen_end(1), std::invalid_argument);
}
