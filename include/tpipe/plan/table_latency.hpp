#pragma once
// TeraPipe's profiled model: a table of measured (b, s, c) -> seconds.
//   t(b, s, 0) = T0(b, s), the c = 0 samples, interpolated linearly in s and then in b;
//   t(b, s, c) = T0(b, s) + delta(b, s, c) for c > 0, where
//   delta      = a0 + a1*b*s + a2*b*c + a3*b*s*c is fitted by least squares to the c > 0
//                samples' excess over T0 (the paper's form).
// Unlike the official code, delta is not added at c = 0 (so t(b, s, 0) is the measurement),
// every context sample must have a c = 0 counterpart (no silent misalignment), and a query
// outside the measured (b, s) range is refused rather than extrapolated.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/plan/latency_model.hpp"

namespace tpipe {

//! One measured point.
struct latency_sample {
    std::int64_t b = 1;
    std::int64_t s = 1;
    std::int64_t c = 0;
    double seconds = 0;
    friend bool operator==(const latency_sample&, const latency_sample&) = default;
};

class table_latency {
public:
    //! Coefficients of delta = a0 + a1*bs + a2*bc + a3*bsc.
    using delta_coefficients = std::array<double, 4>;

    table_latency() = default;

    //! Builds the model; refuses negative or non-finite times, duplicate points, a context
    //! sample without a c = 0 sample to compare with, and a context set too small to fit delta.
    explicit table_latency(std::vector<latency_sample> samples) : samples_(std::move(samples))
    {
        if (samples_.empty()) detail::refuse("table latency: the table has no samples");
        std::map<std::array<std::int64_t, 3>, double> seen;
        for (const auto& p : samples_) {
            detail::require_unit_shape(p.b, p.s, p.c, "table latency sample");
            if (!std::isfinite(p.seconds) || p.seconds < 0)
                detail::refuse("table latency: sample (b=" + std::to_string(p.b) + ", s=" + std::to_string(p.s) +
                               ", c=" + std::to_string(p.c) + ") has time " + std::to_string(p.seconds) +
                               "; times must be finite and >= 0 seconds");
            if (!seen.emplace(std::array<std::int64_t, 3>{p.b, p.s, p.c}, p.seconds).second)
                detail::refuse("table latency: sample (b=" + std::to_string(p.b) + ", s=" + std::to_string(p.s) +
                               ", c=" + std::to_string(p.c) + ") appears twice; give each point once");
            if (p.c == 0) rows_[p.b].emplace_back(p.s, p.seconds);
        }
        if (rows_.empty())
            detail::refuse("table latency: no sample has c = 0; the context-free time T0(b, s) needs them");
        for (auto& [b, row] : rows_) std::sort(row.begin(), row.end());
        fit_delta();
    }

    const std::vector<latency_sample>& samples() const { return samples_; }
    const delta_coefficients& delta() const { return delta_; }
    //! Coefficient of determination of the delta fit on the context samples (1 = perfect).
    double delta_r_squared() const { return r2_; }

    //! Measured-and-interpolated context-free time T0(b, s).
    double context_free(std::int64_t b, std::int64_t s) const
    {
        auto hi = rows_.lower_bound(b);
        if (hi != rows_.end() && hi->first == b) return along_s(hi->second, b, s);
        if (hi == rows_.end() || hi == rows_.begin())
            detail::refuse("table latency: b=" + std::to_string(b) + " lies outside the measured rows b=" +
                           std::to_string(rows_.begin()->first) + ".." + std::to_string(rows_.rbegin()->first) +
                           "; profile that batch size or cap the rows per microbatch (slicing_problem::max_microbatch)");
        auto lo = std::prev(hi);
        const double t_lo = along_s(lo->second, lo->first, s), t_hi = along_s(hi->second, hi->first, s);
        const double w = static_cast<double>(b - lo->first) / static_cast<double>(hi->first - lo->first);
        return t_lo + w * (t_hi - t_lo);
    }

    double context_delta(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        const double B = static_cast<double>(b), S = static_cast<double>(s), C = static_cast<double>(c);
        return delta_[0] + delta_[1] * B * S + delta_[2] * B * C + delta_[3] * B * S * C;
    }

    double seconds(std::int64_t b, std::int64_t s, std::int64_t c) const
    {
        detail::require_unit_shape(b, s, c, "table latency");
        const double t0 = context_free(b, s);
        return c == 0 ? t0 : t0 + context_delta(b, s, c);
    }

private:
    using row = std::vector<std::pair<std::int64_t, double>>; // (s, seconds) ascending in s

    static double along_s(const row& r, std::int64_t b, std::int64_t s)
    {
        auto it = std::lower_bound(r.begin(), r.end(), std::pair<std::int64_t, double>{s, -1.0});
        if (it != r.end() && it->first == s) return it->second;
        if (it == r.end() || it == r.begin())
            detail::refuse("table latency: s=" + std::to_string(s) + " lies outside the measured s=" +
                           std::to_string(r.front().first) + ".." + std::to_string(r.back().first) +
                           " for b=" + std::to_string(b) +
                           "; profile that length or plan at a granularity the table covers");
        auto lo = std::prev(it);
        const double w = static_cast<double>(s - lo->first) / static_cast<double>(it->first - lo->first);
        return lo->second + w * (it->second - lo->second);
    }

    // Least squares on [1, bs, bc, bsc] via the normal equations. Columns are scaled to unit
    // maximum first so that b*s*c ~ 1e9 does not swamp the intercept.
    void fit_delta()
    {
        std::vector<std::array<double, 4>> x;
        std::vector<double> y;
        for (const auto& p : samples_) {
            if (p.c == 0) continue;
            double t0 = 0;
            try {
                t0 = context_free(p.b, p.s);
            } catch (const invalid_argument&) {
                detail::refuse("table latency: context sample (b=" + std::to_string(p.b) + ", s=" +
                               std::to_string(p.s) + ", c=" + std::to_string(p.c) +
                               ") has no c = 0 time T0(b, s) to compare with; measure (b, s, 0) too");
            }
            const double B = static_cast<double>(p.b), S = static_cast<double>(p.s), C = static_cast<double>(p.c);
            x.push_back({1.0, B * S, B * C, B * S * C});
            y.push_back(p.seconds - t0);
        }
        if (x.size() < 4)
            detail::refuse("table latency: " + std::to_string(x.size()) +
                           " samples have c > 0, but fitting delta = a0 + a1*bs + a2*bc + a3*bsc needs at least 4 "
                           "with varied b*s, b*c and b*s*c");
        std::array<double, 4> scale{};
        for (const auto& r : x)
            for (int j = 0; j < 4; ++j) scale[j] = std::max(scale[j], std::fabs(r[j]));
        std::array<std::array<double, 5>, 4> a{}; // augmented normal matrix
        for (std::size_t i = 0; i < x.size(); ++i)
            for (int j = 0; j < 4; ++j) {
                const double xj = x[i][j] / scale[j];
                for (int k = 0; k < 4; ++k) a[j][k] += xj * (x[i][k] / scale[k]);
                a[j][4] += xj * y[i];
            }
        double norm = 0;
        for (int j = 0; j < 4; ++j) norm = std::max(norm, std::fabs(a[j][j]));
        for (int col = 0; col < 4; ++col) {
            int piv = col;
            for (int r = col + 1; r < 4; ++r)
                if (std::fabs(a[r][col]) > std::fabs(a[piv][col])) piv = r;
            if (std::fabs(a[piv][col]) <= 1e-12 * norm)
                detail::refuse("table latency: the context samples do not determine delta (the columns 1, b*s, b*c, "
                               "b*s*c are linearly dependent); profile more distinct (b, s, c) with c > 0");
            std::swap(a[piv], a[col]);
            for (int r = 0; r < 4; ++r) {
                if (r == col) continue;
                const double f = a[r][col] / a[col][col];
                for (int k = col; k < 5; ++k) a[r][k] -= f * a[col][k];
            }
        }
        for (int j = 0; j < 4; ++j) delta_[j] = a[j][4] / a[j][j] / scale[j];
        double mean = 0;
        for (double v : y) mean += v;
        mean /= static_cast<double>(y.size());
        double ss_res = 0, ss_tot = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            double pred = 0;
            for (int j = 0; j < 4; ++j) pred += delta_[j] * x[i][j];
            ss_res += (y[i] - pred) * (y[i] - pred);
            ss_tot += (y[i] - mean) * (y[i] - mean);
        }
        r2_ = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
    }

    std::vector<latency_sample> samples_;
    std::map<std::int64_t, row> rows_;
    delta_coefficients delta_{};
    double r2_ = 1.0;
};

} // namespace tpipe
