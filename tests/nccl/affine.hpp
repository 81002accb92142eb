#pragma once
// The host stage of the NCCL tests (tpipe_test::affine, tests/exec/affine.hpp) and their inputs:
// integer-valued doubles, so sums are exact in any order (NCCL's order is not the rank-order
// fold) and a run on GPUs can be compared bit for bit.
#include <cstddef>
#include <vector>

#include "../exec/affine.hpp"

namespace nccl_test {

using tpipe_test::affine;
using tpipe_test::coef_a;
using tpipe_test::coef_b;
using tpipe_test::dvec;
using tpipe_test::affine_stages;

//! Input of microbatch m of replica d: sizes 0..3 (microbatch 0's payloads are empty), integer values.
inline dvec sample(int d, int m)
{
    dvec x(static_cast<std::size_t>(m % 4));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = double(d * 10 + m * 3 + int(i));
    return x;
}

//! The loss gradient the tests seed backward with (integer-valued).
inline dvec loss_grad(dvec y)
{
    for (double& v : y) v = double(static_cast<long long>(v) % 5 + 1);
    return y;
}

} // namespace nccl_test
