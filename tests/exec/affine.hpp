#pragma once
// A test stage with weights: y = a*x + b, whose weight gradients (da, db) are exposed for data
// parallelism. Used with integer-valued doubles, so sums are exact whatever their order (a
// communicator's fold order, NCCL's included, cannot change a bit).
#include <cstddef>
#include <map>
#include <span>
#include <stdexcept>
#include <vector>

#include "tpipe/exec/gradients.hpp"
#include "tpipe/exec/stage.hpp"

namespace tpipe_test {

using dvec = std::vector<double>;

struct affine {
    using input = dvec;
    using output = dvec;
    double a = 1, b = 0;
    std::vector<double> grad = {0, 0};  // da, db
    std::map<int, dvec> saved;
    int fail_at_microbatch = -1;  //!< backward of this microbatch throws

    dvec forward(const tpipe::unit& u, dvec x)
    {
        dvec y(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) y[i] = a * x[i] + b;
        saved[u.microbatch] = std::move(x);
        return y;
    }
    dvec backward(const tpipe::unit& u, dvec g)
    {
        if (u.microbatch == fail_at_microbatch) throw std::runtime_error("injected fault in B");
        const dvec& x = saved.at(u.microbatch);
        dvec dx(g.size());
        for (std::size_t i = 0; i < g.size(); ++i) {
            dx[i] = a * g[i];
            grad[0] += x[i] * g[i];
            grad[1] += g[i];
        }
        return dx;
    }
    std::span<double> gradients() { return grad; }
};
static_assert(tpipe::exposes_gradients<affine>);

//! The coefficients of stage `stage` in affine_stages.
inline double coef_a(int stage) { return stage % 2 + 1; }
inline double coef_b(int stage) { return stage; }

//! n stages with coef_a / coef_b.
inline std::vector<affine> affine_stages(int n)
{
    std::vector<affine> s(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) s[i].a = coef_a(i), s[i].b = coef_b(i);
    return s;
}

} // namespace tpipe_test
