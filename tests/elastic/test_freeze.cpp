// AutoFreeze: the progressive closed form exactly (integer boundaries included), monotone,
// capped; the paper's rule with its bound and gradient criterion; user policies plug in.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tpipe/elastic/freeze.hpp"

using tpipe::elastic::fraction;
using tpipe::elastic::freeze_observation;

namespace {
//! ceil(L (1 - (1 - p/q)^e)) by exact integer arithmetic: L (q^e - (q-p)^e) / q^e, rounded up.
int exact_closed_form(long long L, long long p, long long q, int e)
{
    long long qe = 1, re = 1;
    for (int i = 0; i < e; ++i) qe *= q, re *= (q - p);
    const long long num = L * (qe - re);
    return static_cast<int>((num + qe - 1) / qe);
}
} // namespace

TEST_CASE("fraction parses p/q and decimals exactly and refuses values outside (0, 1]")
{
    CHECK(fraction::parse("1/3") == fraction{1, 3});
    CHECK(fraction::parse("2/6") == fraction{1, 3});
    CHECK(fraction::parse("0.25") == fraction{1, 4});
    CHECK(fraction::parse(".5") == fraction{1, 2});
    CHECK(fraction::parse("1") == fraction{1, 1});
    CHECK(fraction::nearest(1.0 / 3) == fraction{1, 3});
    CHECK(fraction::nearest(0.07) == fraction{7, 100});
    for (const char* bad : {"0", "1.5", "-1/3", "1/0", "x", "1/3x", "0.1234567", ""})
        CHECK_THROWS_AS(fraction::parse(bad), tpipe::invalid_argument);
    CHECK_THROWS_AS(fraction::nearest(0.0), tpipe::invalid_argument);
}

TEST_CASE("progressive freeze equals the exact closed form, including where it is an integer")
{
    // Integer boundaries: L = 12, alpha = 1/3 at e = 1 (exactly 4) and alpha = 1/2 at e = 1, 2
    // (exactly 6 and 9); a floating-point L*(1-pow(1-a,e)) can land above and ceil to one more.
    tpipe::elastic::progressive_freeze third(fraction{1, 3}), half(fraction{1, 2});
    CHECK(third.closed_form(12, 1) == 4);
    CHECK(half.closed_form(12, 1) == 6);
    CHECK(half.closed_form(12, 2) == 9);
    CHECK(tpipe::elastic::freeze_schedule(third, 12, 9) == std::vector<int>{0, 4, 7, 9, 10, 11, 11, 12, 12});
    for (int L : {1, 2, 7, 12, 24, 96})
        for (auto [p, q] : {std::pair{1, 3}, {1, 2}, {1, 4}, {2, 5}, {1, 5}, {7, 100}, {1, 1}, {3, 8}}) {
            tpipe::elastic::progressive_freeze policy(fraction::of(p, q));
            int prev = 0;
            for (int e = 0; e <= 8; ++e) {
                const int f = policy.closed_form(L, e);
                CHECK(f == exact_closed_form(L, p, q, e));
                CHECK(f >= prev);  // monotone
                CHECK(f <= L);
                prev = f;
            }
        }
}

TEST_CASE("progressive freeze stays exact for long runs and small alpha")
{
    tpipe::elastic::progressive_freeze policy(fraction{1, 1000});
    int prev = 0;
    for (int e = 0; e <= 20000; e += 97) {
        const int f = policy.closed_form(96, e);
        CHECK(f >= prev);
        prev = f;
        const double x = 96 * (1 - std::pow(0.999, e));
        if (std::fabs(x - std::round(x)) > 1e-6) CHECK(f == static_cast<int>(std::ceil(x)));
    }
    CHECK(prev == 96);
}

TEST_CASE("max_frozen keeps trailing layers trainable; the head is never among the L layers")
{
    tpipe::elastic::progressive_freeze policy(fraction{1, 2});
    const auto s = tpipe::elastic::freeze_schedule(policy, 12, 10, 11);
    CHECK(s.back() == 11);
    for (int f : s) CHECK(f <= 11);
    CHECK_THROWS_AS(tpipe::elastic::freeze_schedule(policy, 12, 10, 13), tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::elastic::freeze_schedule(policy, 0, 10), tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::elastic::freeze_schedule(policy, 12, 0), tpipe::invalid_argument);
}

TEST_CASE("paper rule: bound F + ceil(alpha (L - F)), capped by the smallest active gradient norm")
{
    tpipe::elastic::paper_freeze policy(fraction{1, 3});
    // Without gradients: the integer recursion, which runs ahead of the closed form at e = 6.
    CHECK(tpipe::elastic::freeze_schedule(policy, 12, 8) == std::vector<int>{0, 4, 7, 9, 10, 11, 12, 12});
    std::vector<double> norms(12, 1.0);
    norms[1] = 0.1;  // smallest: freeze up to and including layer 1
    CHECK(tpipe::elastic::next_frozen(policy, freeze_observation{1, 12, 0, -1, norms}) == 2);
    norms[1] = 5, norms[9] = 0.01;  // the smallest is beyond the bound: the bound wins
    CHECK(tpipe::elastic::next_frozen(policy, freeze_observation{1, 12, 0, -1, norms}) == 4);
    // Norms of frozen layers are ignored; ties go to the lowest active layer.
    std::vector<double> tied{0.0, 0.0, 0.0, 0.0, 3, 2, 2, 9, 9, 9, 9, 9};
    CHECK(tpipe::elastic::next_frozen(policy, freeze_observation{2, 12, 4, -1, tied}) == 6);
    CHECK(tpipe::elastic::next_frozen(policy, freeze_observation{0, 12, 0, -1, tied}) == 0);  // epoch 0 freezes nothing
    CHECK_THROWS_AS(tpipe::elastic::next_frozen(policy, freeze_observation{1, 12, 0, -1, std::vector<double>(5, 1.0)}),
                    tpipe::invalid_argument);
    CHECK_THROWS_AS(tpipe::elastic::next_frozen(policy, freeze_observation{1, 12, 0, -1, std::vector<double>(12, NAN)}),
                    tpipe::invalid_argument);
}

namespace {
struct unfreezing {  // a user policy that breaks monotonicity
    int next_frozen(const freeze_observation& o) { return o.frozen - 1; }
};
struct every_other_epoch {  // a user policy with state
    int calls = 0;
    int next_frozen(const freeze_observation& o) { return ++calls % 2 == 0 ? std::min(o.cap(), o.frozen + 1) : o.frozen; }
};
} // namespace

TEST_CASE("user policies plug in and are held to monotonicity and the cap")
{
    static_assert(tpipe::elastic::freeze_policy<every_other_epoch>);
    every_other_epoch p;
    CHECK(tpipe::elastic::freeze_schedule(p, 3, 8) == std::vector<int>{0, 1, 1, 2, 2, 3, 3, 3});
    unfreezing bad;
    CHECK_THROWS_AS(tpipe::elastic::next_frozen(bad, freeze_observation{1, 12, 3, -1, {}}), tpipe::error);
}
