#pragma once
// Inputs and expected results of all-reduce tests, shared by the thread and MPI communicator
// suites: values whose sum changes its bits with the summation order, the rank-order and ring-order sums, and
// a bitwise comparison.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

namespace tpipe_test {

//! Values of very different magnitudes, so that a different summation order changes the bits.
template <class T>
std::vector<T> values_of(int rank, std::size_t n)
{
    std::mt19937_64 rng(static_cast<unsigned>(1234 + rank));
    std::vector<T> v(n);
    for (auto& x : v) {
        if constexpr (std::is_floating_point_v<T>) {
            std::uniform_real_distribution<double> mant(-1.0, 1.0);
            std::uniform_int_distribution<int> exp(-20, 20);
            x = static_cast<T>(std::ldexp(mant(rng), exp(rng)));
        } else {
            x = static_cast<T>(static_cast<std::int64_t>(rng() % 2000001) - 1000000);
        }
    }
    return v;
}

template <class T>
std::vector<T> rank_order_sum(int d, std::size_t n)
{
    std::vector<T> sum = values_of<T>(0, n);
    for (int r = 1; r < d; ++r) {
        auto v = values_of<T>(r, n);
        for (std::size_t k = 0; k < n; ++k) sum[k] += v[k];
    }
    return sum;
}

//! The ring order of tpipe/comm/reduction_order.hpp, written out independently: element k lies
//! in segment s (n split into d parts, the first n % d one longer) and is the left fold of the
//! members s+1, s+2, ..., d-1, 0, ..., s.
template <class T>
std::vector<T> ring_order_sum(int d, std::size_t n)
{
    std::vector<std::vector<T>> x;
    for (int r = 0; r < d; ++r) x.push_back(values_of<T>(r, n));
    std::vector<T> sum(n);
    std::size_t k = 0;
    for (int s = 0; s < d; ++s) {
        const std::size_t len = n / static_cast<std::size_t>(d) + (static_cast<std::size_t>(s) < n % static_cast<std::size_t>(d) ? 1 : 0);
        for (std::size_t e = 0; e < len; ++e, ++k) {
            T acc = x[static_cast<std::size_t>((s + 1) % d)][k];
            for (int m = s + 2; m <= s + d; ++m) acc += x[static_cast<std::size_t>(m % d)][k];
            sum[k] = acc;
        }
    }
    return sum;
}

template <class T>
bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b)
{
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

} // namespace tpipe_test
