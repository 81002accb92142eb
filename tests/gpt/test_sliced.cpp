// Token-sliced forward/backward (slices in order forward, reverse order backward, K/V gradients
// accumulated) equals the unsliced model, for rows x tokens schemes and chains of parts.
#include <catch2/catch.hpp>

#include <tpipe/slice/slicers.hpp>

#include "common.hpp"

using gpt_test::random_batch;
using gpt_test::rel_err;

namespace {

template <class T>
void compare(const gpt::config& cfg, const tpipe::scheme& sch, std::vector<int> cuts, std::int64_t rows,
             double tol, int threads = 1)
{
    gpt::parameters<T> ref(cfg);
    ref.init(11);
    const auto b = random_batch(cfg, rows, cfg.seq_len, 5);
    const double loss_ref = gpt::full_step(ref, b);

    gpt::parameters<T> p(cfg);
    p.init(11);
    std::vector<gpt::part<T>> parts;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i)
        parts.emplace_back(p, cuts[i], cuts[i + 1], i == 0, i + 2 == cuts.size(), threads);
    std::vector<gpt::part<T>*> chain;
    for (auto& x : parts) chain.push_back(&x);
    const double loss = gpt::run_in_order(chain, sch, b);
    INFO("units " << sch.units() << " parts " << parts.size());
    CHECK(std::abs(loss - loss_ref) <= tol * std::abs(loss_ref));
    for (const auto& t : p.lay.tensors) {
        INFO("tensor " << t.name);
        CHECK(rel_err(p.grad.data() + t.offset, ref.grad.data() + t.offset, t.size()) <= tol);
    }
}

} // namespace

TEST_CASE("sliced equals unsliced in double (to rounding)", "[gpt][sliced]")
{
    auto cfg = gpt_test::tiny_config();
    cfg.seq_len = 9;
    for (bool tied : {true, false}) {
        cfg.tied = tied;
        compare<double>(cfg, tpipe::token_slicer{{4, 3, 2}}.scheme({3, 9}), {0, 2}, 3, 1e-12);
        compare<double>(cfg, tpipe::grid_slicer{3, {1, 1, 5, 2}}.scheme({3, 9}), {0, 1, 2}, 3, 1e-12);
        compare<double>(cfg, tpipe::uniform_grid_slicer{2, 9}.scheme({3, 9}), {0, 0, 1, 2, 2}, 3, 1e-12);
        compare<double>(cfg, tpipe::microbatch_slicer{3}.scheme({3, 9}), {0, 1, 2}, 3, 1e-12);
    }
}

TEST_CASE("sliced equals unsliced across attention query blocks (double)", "[gpt][sliced]")
{
    auto cfg = gpt_test::tiny_config();
    cfg.seq_len = 200;
    compare<double>(cfg, tpipe::token_slicer{{70, 1, 63, 66}}.scheme({2, 200}), {0, 1, 2}, 2, 1e-12, 2);
    compare<double>(cfg, tpipe::grid_slicer{2, {130, 70}}.scheme({2, 200}), {0, 2}, 2, 1e-12);
}

TEST_CASE("sliced equals unsliced in float", "[gpt][sliced]")
{
    gpt::config cfg;
    cfg.vocab = 64;
    cfg.d_model = 32;
    cfg.heads = 4;
    cfg.layers = 3;
    cfg.seq_len = 40;
    compare<float>(cfg, tpipe::token_slicer{{16, 10, 8, 6}}.scheme({2, 40}), {0, 3}, 2, 1e-5);
    compare<float>(cfg, tpipe::grid_slicer{2, {7, 33}}.scheme({2, 40}), {0, 1, 3}, 2, 1e-5, 2);
}

TEST_CASE("a part refuses units out of causal order", "[gpt][sliced]")
{
    const auto cfg = gpt_test::tiny_config();
    gpt::parameters<float> p(cfg);
    p.init(1);
    const auto b = random_batch(cfg, 2, cfg.seq_len, 1);
    gpt::part<float> whole(p, 0, cfg.layers, true, true);
    whole.begin(&b);
    REQUIRE_THROWS_AS(whole.forward(tpipe::unit{0, 1, 0, 2, 3, 6}, {}), std::logic_error);
    whole.forward(tpipe::unit{0, 0, 0, 2, 0, 3}, {});
    whole.forward(tpipe::unit{0, 1, 0, 2, 3, 6}, {});
    REQUIRE_THROWS_AS(whole.backward(tpipe::unit{0, 0, 0, 2, 0, 3}, {}), std::logic_error);
    REQUIRE_NOTHROW(whole.backward(tpipe::unit{0, 1, 0, 2, 3, 6}, {}));
    REQUIRE_NOTHROW(whole.backward(tpipe::unit{0, 0, 0, 2, 0, 3}, {}));
}

TEST_CASE("sliced training in double follows the unsliced run for 20 steps", "[gpt][sliced]")
{
    // Float runs drift apart slowly over many steps (rounding amplified by AdamW); in double the
    // drift stays at rounding level, which shows the slicing itself is exact.
    gpt::config cfg;
    cfg.vocab = 32;
    cfg.d_model = 16;
    cfg.heads = 2;
    cfg.layers = 3;
    cfg.seq_len = 24;
    gpt::parameters<double> ref(cfg), p(cfg);
    ref.init(4);
    p.init(4);
    gpt::adamw<double> opt_ref(ref, {.lr = 3e-3}), opt(p, {.lr = 3e-3});
    gpt::part<double> a(p, 0, 1, true, false), b(p, 1, 3, false, true);
    const auto sch = tpipe::grid_slicer{2, {5, 3, 9, 7}}.scheme({4, 24});
    double worst = 0;
    for (int step = 0; step < 20; ++step) {
        const auto batch = random_batch(cfg, 4, cfg.seq_len, 50 + static_cast<std::uint64_t>(step));
        const double l_ref = gpt::full_step(ref, batch);
        const double l = gpt::run_in_order<double>({&a, &b}, sch, batch);
        worst = std::max(worst, std::abs(l - l_ref) / l_ref);
        opt_ref.step(ref);
        opt.step(p);
    }
    CHECK(worst < 1e-11);
    CHECK(rel_err(p.value, ref.value) < 1e-9);
}
