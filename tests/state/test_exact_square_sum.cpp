// tpipe::exact_square_sum: the correctly rounded sum of squares, whatever the split and order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "tpipe/state/exact_square_sum.hpp"

namespace {

template <class T>
double exact_of(std::span<const T> x)
{
    tpipe::exact_square_sum<T> s;
    s.add(x);
    return s.value();
}

//! Floats of exponents in [-10, 10): every square is an integer times 2^-66, so a 128-bit
//! integer holds their sum exactly; the compiler's conversion of it to double rounds once.
double reference(const std::vector<float>& x)
{
    tpipe::detail::uint128 sum = 0;
    for (float v : x) {
        int e = 0;
        const double m = std::frexp(static_cast<double>(v), &e);  // v = m 2^e, m in [0.5, 1)
        const auto q = static_cast<std::uint64_t>(std::ldexp(std::abs(m), 24));  // 24 bits
        REQUIRE(e - 24 >= -33);
        sum += (static_cast<tpipe::detail::uint128>(q) * q) << (2 * (e - 24 + 33));
    }
    return std::ldexp(static_cast<double>(sum), -66);
}

std::vector<float> random_floats(std::size_t n, int lo_exp, int hi_exp, std::uint64_t seed)
{
    std::mt19937_64 g(seed);
    std::uniform_real_distribution<double> mant(0.5, 1.0);
    std::uniform_int_distribution<int> ex(lo_exp, hi_exp - 1);
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(std::ldexp(mant(g), ex(g)) * (g() % 2 ? 1 : -1));
    return x;
}

} // namespace

TEST_CASE("exact_square_sum rounds the exact sum once (checked against 128-bit integers)", "[state][norm]")
{
    for (std::uint64_t seed : {1u, 2u, 3u}) {
        const auto x = random_floats(5000, -9, 10, seed);
        CHECK(std::bit_cast<std::uint64_t>(exact_of<float>(x)) == std::bit_cast<std::uint64_t>(reference(x)));
    }
    CHECK(exact_of<float>(std::vector<float>{}) == 0.0);
    CHECK(exact_of<float>(std::vector<float>{0.0f, -0.0f}) == 0.0);
    CHECK(exact_of<float>(std::vector<float>{-3.0f}) == 9.0);
}

TEST_CASE("exact_square_sum breaks a tie with the bits below the double's precision", "[state][norm]")
{
    // 1 + 2^-54 + 2^-54 is a tie between 1 and 1 + 2^-52 (even: 1); 2^-60 more lies above it.
    // A double fold in this order loses every small term and gives 1.
    const std::vector<float> tie{1.0f, std::ldexp(1.0f, -27), std::ldexp(1.0f, -27)};
    CHECK(exact_of<float>(tie) == 1.0);
    std::vector<float> above = tie;
    above.push_back(std::ldexp(1.0f, -30));
    CHECK(exact_of<float>(above) == 1.0 + std::ldexp(1.0, -52));
    double folded = 0;
    for (float v : above) folded += double(v) * double(v);
    CHECK(folded == 1.0);
}

TEST_CASE("exact_square_sum is the same bits for any split and order of its elements", "[state][norm]")
{
    std::vector<float> x = random_floats(20000, -130, 60, 7);  // subnormals to large
    x.push_back(std::numeric_limits<float>::denorm_min());
    x.push_back(std::numeric_limits<float>::max());
    const double whole = exact_of<float>(x);
    std::mt19937_64 g(11);
    for (int trial = 0; trial < 5; ++trial) {
        std::shuffle(x.begin(), x.end(), g);
        tpipe::exact_square_sum<float> total;
        std::size_t at = 0;
        while (at < x.size()) {  // pieces of random sizes, summed on their own, then the sums added
            const std::size_t n = std::min<std::size_t>(x.size() - at, 1 + g() % 3000);
            tpipe::exact_square_sum<float> piece;
            piece.add(std::span<const float>(x).subspan(at, n));
            total.add(piece);
            at += n;
        }
        CHECK(std::bit_cast<std::uint64_t>(total.value()) == std::bit_cast<std::uint64_t>(whole));
    }
    // The digits are what a communicator all-reduces: adding them is adding the sums.
    tpipe::exact_square_sum<float> a, b;
    a.add(std::span<const float>(x).first(100));
    b.add(std::span<const float>(x).subspan(100));
    for (std::size_t i = 0; i < a.size; ++i) a.digits()[i] += b.digits()[i];
    CHECK(std::bit_cast<std::uint64_t>(a.value()) == std::bit_cast<std::uint64_t>(whole));
    CHECK(std::isfinite(whole));
    CHECK(whole >= double(std::numeric_limits<float>::max()) * std::numeric_limits<float>::max());
}

TEST_CASE("exact_square_sum of doubles: exact and split-independent", "[state][norm]")
{
    // Doubles with 24-bit significands: the squares are exact in double, and small enough
    // integers here that the double fold below is exact too.
    std::vector<double> x;
    for (float v : random_floats(1000, 0, 4, 5)) x.push_back(std::round(std::ldexp(static_cast<double>(v), 10)));
    double fold = 0;
    for (double v : x) fold += v * v;
    CHECK(exact_of<double>(x) == fold);
    std::vector<double> wide;
    std::mt19937_64 g(3);
    for (int i = 0; i < 5000; ++i) wide.push_back(std::ldexp(std::uniform_real_distribution<double>(-1, 1)(g), int(g() % 400) - 200));
    const double whole = exact_of<double>(wide);
    std::reverse(wide.begin(), wide.end());
    tpipe::exact_square_sum<double> a, b;
    a.add(std::span<const double>(wide).first(1234));
    b.add(std::span<const double>(wide).subspan(1234));
    a.add(b);
    CHECK(std::bit_cast<std::uint64_t>(a.value()) == std::bit_cast<std::uint64_t>(whole));
}

TEST_CASE("exact_square_sum: an infinity gives +inf, a NaN gives NaN, whatever else was added", "[state][norm]")
{
    tpipe::exact_square_sum<float> s;
    s.add(std::vector<float>{1.0f, -std::numeric_limits<float>::infinity()});
    CHECK(s.value() == std::numeric_limits<double>::infinity());
    tpipe::exact_square_sum<float> n;
    n.add(std::vector<float>{std::numeric_limits<float>::quiet_NaN()});
    s.add(n);
    CHECK(std::isnan(s.value()));
    s.clear();
    CHECK(s.value() == 0.0);
}
