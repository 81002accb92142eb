// The reference GPT tensor-parallel (Megatron's split, gpt::tensor_split) and pipelined at once,
// on threads: t tensor ranks x K stages, each tensor rank's pipeline on a thread of its own with a
// loop per stage, its stages summing over their tensor group through tpipe::blocking_group. The
// loss, and every gradient put back in the whole model's place, equal the model at t = 1 within
// float rounding: a row-parallel product is a sum of t partial products, added in another order
// than one rank's (the bits differ, the tolerance below bounds by how much). Token slices run
// through the tensor-parallel stages (each rank keeps the K/V of its own heads); the embedding and
// the head (tied or not) are vocabulary-parallel.
#include <catch2/catch.hpp>

#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "common.hpp"
#include "gpt/pipeline.hpp"
#include "gpt/stage_state.hpp"
#include "tpipe/comm/blocking_group.hpp"
#include "tpipe/comm/thread_communicator.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/slice/slicers.hpp"

namespace {

struct tp_run {
    double loss = 0;
    std::vector<float> grads, values;  // the whole model's, put together from every tensor rank
};

//! One step of t x K on threads under `schedule`, `recompute` or not, sequence-parallel or not;
//! then an AdamW step with the clip's squares summed over the tensor group (the step's values are
//! compared too).
tp_run run_tensor_parallel(const gpt::config& cfg, const gpt::batch& b, const tpipe::scheme& units, int t, int K,
                           const char* schedule, bool recompute, bool sequence_parallel = false)
{
    const auto prog = tpipe::make_schedule(schedule).program(tpipe::topology{K}, units);
    const int stages = prog.stages();
    // One group of t members per stage; tensor rank k's blocking view of each.
    std::vector<std::unique_ptr<tpipe::thread_group>> groups;
    for (int s = 0; s < stages; ++s) groups.push_back(std::make_unique<tpipe::thread_group>(t));
    tpipe::thread_group clip(t);  // the tensor group's sum of the clip's squares

    std::vector<std::unique_ptr<gpt::stage_states<float>>> states(static_cast<std::size_t>(t));
    std::vector<double> losses(static_cast<std::size_t>(t));
    std::vector<std::exception_ptr> errors(static_cast<std::size_t>(t));
    std::vector<std::thread> ranks;
    for (int k = 0; k < t; ++k)
        ranks.emplace_back([&, k] {
            try {
                auto& st = states[static_cast<std::size_t>(k)];
                st = std::make_unique<gpt::stage_states<float>>(cfg, stages, std::vector<int>{}, std::vector<bool>{},
                                                                gpt::adamw_options{}, 7, gpt::tensor_split{k, t});
                gpt::pipelined_model<float> model(cfg, st->pointers(), 1);
                std::vector<tpipe::thread_communicator> members;
                std::vector<std::unique_ptr<tpipe::blocking_group<tpipe::thread_communicator>>> sums;
                for (auto& g : groups) members.push_back(g->member(k));
                for (int s = 0; s < stages; ++s) {
                    sums.push_back(std::make_unique<tpipe::blocking_group<tpipe::thread_communicator>>(members[s]));
                    auto* g = sums.back().get();
                    model.part_at(s).set_tensor_sum([g](std::span<float> v) { g->all_reduce_sum(v); });
                    if (sequence_parallel)
                        model.part_at(s).set_sequence_parallel([g](std::span<float> v) { g->reduce_scatter_sum(v); },
                                                               [g](std::span<float> v) { g->all_gather(v); });
                }
                model.set_recompute(recompute);
                // A loop per stage: a stage blocked in its group's sum must not hold a loop another needs.
                tpipe::cpu_engine engine(K, tpipe::cpu_engine::options{.threads = K});
                losses[static_cast<std::size_t>(k)] = model.step(b, prog, engine);
                if (auto* tie = st->tie()) tie->sum_here();
                auto squares = st->squares();
                tpipe::thread_communicator c = clip.member(k);
                tpipe::sync_wait([](tpipe::thread_communicator& c, std::span<std::int64_t> v) -> tpipe::task<void> {
                    co_await c.all_reduce_sum(v);
                }(c, squares.digits()));
                st->step(squares);
            } catch (...) {
                errors[static_cast<std::size_t>(k)] = std::current_exception();
            }
        });
    for (auto& th : ranks) th.join();
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    tp_run out;
    out.loss = losses[0];
    for (int k = 1; k < t; ++k) REQUIRE(losses[static_cast<std::size_t>(k)] == losses[0]);  // the same bits on every rank
    // Each element is one rank's (shares in place, whole tensors from rank 0): the sum is exact.
    for (const bool grads : {true, false}) {
        std::vector<float> whole = states[0]->whole(grads);
        for (int k = 1; k < t; ++k) {
            const auto mine = states[static_cast<std::size_t>(k)]->whole(grads);
            for (std::size_t i = 0; i < whole.size(); ++i) whole[i] += mine[i];
        }
        (grads ? out.grads : out.values) = std::move(whole);
    }
    return out;
}

//! The model at t = 1, not pipelined: one step's loss and gradients, and its AdamW step's values.
tp_run reference_run(const gpt::config& cfg, const gpt::batch& b)
{
    gpt::parameters<float> whole(cfg);
    whole.init(7);
    tp_run out;
    out.loss = gpt::full_step(whole, b);
    out.grads = whole.grad;
    gpt::adamw<float> opt(whole, {});
    opt.step(whole);
    out.values = whole.value;
    return out;
}

//! 4 heads and a vocabulary of 16: t = 2 and 4 divide both.
gpt::config tensor_config()
{
    gpt::config cfg = gpt_test::tiny_config();
    cfg.heads = 4;
    cfg.d_model = 16;
    cfg.seq_len = 12;
    cfg.layers = 3;
    cfg.vocab = 16;  // the embedding and the head are vocabulary-parallel: t divides it
    return cfg;
}

} // namespace

TEST_CASE("the GPT tensor-parallel over t ranks and pipelined over K stages equals the model at t = 1", "[gpt][tensor]")
{
    gpt::config cfg = tensor_config();
    const auto b = gpt_test::random_batch(cfg, 4, 12, 3);

    struct shape {
        int t, K;
        const char* schedule;
        tpipe::scheme units;
        bool recompute, tied;
    };
    const std::vector<shape> shapes = {
        {2, 2, "1f1b", tpipe::microbatch_slicer{2}.scheme({4, 12}), false, true},
        {4, 2, "1f1b", tpipe::grid_slicer{2, {5, 7}}.scheme({4, 12}), false, true},   // token slices: K/V per rank
        {2, 3, "zb-h1", tpipe::grid_slicer{2, {4, 8}}.scheme({4, 12}), false, true},  // the split backward
        {2, 2, "1f1b", tpipe::grid_slicer{2, {6, 6}}.scheme({4, 12}), true, true},    // recomputation
        {2, 1, "1f1b", tpipe::microbatch_slicer{1}.scheme({4, 12}), false, true},
        {4, 2, "1f1b", tpipe::grid_slicer{2, {5, 7}}.scheme({4, 12}), false, false},  // an untied head
    };
    for (const auto& s : shapes) {
        CAPTURE(s.t, s.K, s.schedule, s.recompute, s.tied);
        cfg.tied = s.tied;
        const tp_run want = reference_run(cfg, b);
        const tp_run got = run_tensor_parallel(cfg, b, s.units, s.t, s.K, s.schedule, s.recompute);
        // Seen: loss <= 4e-9, gradients <= 1.7e-7, stepped weights <= 5e-8 relative (float epsilon 1.2e-7).
        CHECK(std::abs(got.loss - want.loss) / want.loss < 1e-7);
        CHECK(gpt_test::rel_err(got.grads, want.grads) < 1e-6);
        CHECK(gpt_test::rel_err(got.values, want.values) < 1e-6);
    }
}

TEST_CASE("a GPT tensor-parallel part refuses a split that does not divide, and a missing group sum", "[gpt][tensor]")
{
    gpt::config cfg = gpt_test::tiny_config();  // 2 heads, MLP width 32, 13 tokens
    REQUIRE_THROWS_WITH((gpt::layout(cfg, gpt::holding{.tensor = {0, 2}})),
                        Catch::Contains("2 tensor ranks must divide the 2 heads, the MLP width 32 and the vocabulary 13"));
    cfg.vocab = 14;
    REQUIRE_THROWS_WITH((gpt::layout(cfg, gpt::holding{.tensor = {2, 2}})), Catch::Contains("tensor rank 2 of 2"));
    gpt::parameters<float> p(cfg, gpt::holding{.tensor = {1, 2}});
    p.init(1);
    gpt::part<float> part(p, 0, cfg.layers, true, true);
    const auto b = gpt_test::random_batch(cfg, 1, 6, 1);
    part.begin(&b);
    REQUIRE_THROWS_WITH(part.forward({0, 0, 0, 1, 0, 6}, {}), Catch::Contains("needs its tensor group's sum (set_tensor_sum)"));
}

TEST_CASE("sequence parallelism splits the LayerNorm regions along each unit's positions, and trains as the sums do",
          "[gpt][tensor]")
{
    const gpt::config cfg = tensor_config();
    const auto b = gpt_test::random_batch(cfg, 4, 12, 5);

    // The share: ceil(n / t) positions each, the last ranks fewer or none.
    CHECK(gpt::sequence_share::of(10, 4, 0).count == 3);
    CHECK(gpt::sequence_share::of(10, 4, 3).begin == 9);
    CHECK(gpt::sequence_share::of(10, 4, 3).count == 1);
    CHECK(gpt::sequence_share::of(1, 2, 1).count == 0);

    struct shape {
        int t, K;
        const char* schedule;
        tpipe::scheme units;
        bool recompute;
    };
    const std::vector<shape> shapes = {
        {2, 2, "1f1b", tpipe::microbatch_slicer{2}.scheme({4, 12}), false},
        {4, 2, "1f1b", tpipe::grid_slicer{2, {5, 7}}.scheme({4, 12}), false},   // 10 and 14 positions: padded to 12 and 16
        {2, 3, "zb-h1", tpipe::grid_slicer{2, {4, 8}}.scheme({4, 12}), false},  // the split backward
        {2, 2, "1f1b", tpipe::grid_slicer{2, {6, 6}}.scheme({4, 12}), true},    // recomputation
        {2, 2, "1f1b", tpipe::grid_slicer{4, {1, 11}}.scheme({4, 12}), false},  // 1 position: tensor rank 1 holds none
    };
    for (const auto& s : shapes) {
        CAPTURE(s.t, s.K, s.schedule, s.recompute);
        const tp_run want = reference_run(cfg, b);
        const tp_run sums = run_tensor_parallel(cfg, b, s.units, s.t, s.K, s.schedule, s.recompute);
        const tp_run seq = run_tensor_parallel(cfg, b, s.units, s.t, s.K, s.schedule, s.recompute, true);
        // A reduce-scatter then an all-gather is the ring's all-reduce, bit for bit, where the
        // padding leaves the segments where they were (t = 2: any two addends commute; t | n).
        // Every activation is then the same: the loss is, and only the LayerNorms' gradients
        // differ (each rank's sum over its own positions, then the group's sum).
        if (s.t == 2) CHECK(seq.loss == sums.loss);
        CHECK(std::abs(seq.loss - want.loss) / want.loss < 1e-7);
        CHECK(gpt_test::rel_err(seq.grads, want.grads) < 1e-6);
        CHECK(gpt_test::rel_err(seq.values, want.values) < 1e-6);
        CHECK(gpt_test::rel_err(seq.grads, sums.grads) < 1e-6);
    }
}
