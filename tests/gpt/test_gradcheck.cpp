// Every parameter's gradient against central finite differences, in double precision.
#include <catch2/catch.hpp>

#include <cmath>

#include "common.hpp"

using gpt_test::random_batch;
using gpt_test::tiny_config;

namespace {

double loss_only(gpt::parameters<double>& p, const gpt::batch& b)
{
    gpt::part<double> whole(p, 0, p.cfg.layers, true, true);
    whole.begin(&b);
    whole.forward(tpipe::unit{0, 0, 0, b.rows, 0, b.seq_len}, {});
    return whole.loss();
}

void finite_difference_check(bool tied, gpt::config cfg, std::int64_t rows)
{
    gpt::parameters<double> p(cfg);
    p.init(7);
    // Larger weights than the default init so that every path carries a real signal.
    for (auto& v : p.value) v *= 10.0;
    for (const auto& t : p.lay.tensors)
        if (t.shape.size() == 1)
            for (std::int64_t i = 0; i < t.size(); ++i) p.value[t.offset + i] += 0.1 * std::sin(double(i + t.offset));
    const auto b = random_batch(cfg, rows, cfg.seq_len, 3);
    gpt::full_step(p, b);
    const auto analytic = p.grad;
    const double h = 1e-4;
    for (const auto& t : p.lay.tensors) {
        double worst = 0;
        for (std::int64_t i = 0; i < t.size(); ++i) {
            const std::size_t k = static_cast<std::size_t>(t.offset + i);
            const double keep = p.value[k];
            auto at = [&](double delta) {
                p.value[k] = keep + delta;
                return loss_only(p, b);
            };
            // Fourth-order central difference: truncation O(h^4), rounding O(eps / h).
            const double fd = (at(-2 * h) - 8 * at(-h) + 8 * at(h) - at(2 * h)) / (12 * h);
            p.value[k] = keep;
            const double err = std::abs(fd - analytic[k]) / std::max(1e-3, std::abs(fd) + std::abs(analytic[k]));
            worst = std::max(worst, err);
        }
        INFO("tensor " << t.name << (tied ? " (tied)" : " (untied)"));
        CHECK(worst < 1e-7);
    }
}

} // namespace

TEST_CASE("gradients equal central finite differences (double, tied head)", "[gpt][gradcheck]")
{
    finite_difference_check(true, tiny_config(true), 2);
}

TEST_CASE("gradients equal central finite differences (double, untied head)", "[gpt][gradcheck]")
{
    finite_difference_check(false, tiny_config(false), 2);
}

TEST_CASE("gradients equal central finite differences over several attention query blocks", "[gpt][gradcheck]")
{
    // 150 tokens: the attention runs in blocks of 64 queries, each reading only the keys it sees.
    gpt::config cfg;
    cfg.vocab = 5;
    cfg.d_model = 4;
    cfg.heads = 2;
    cfg.layers = 1;
    cfg.seq_len = 150;
    finite_difference_check(true, cfg, 1);
}
