#pragma once
// A fixed token latency table for the elastic × TeraPipe tests (tests/gpt/test_elastic_terapipe.cpp,
// tests/libtorch/test_libtorch.cpp), so that the DP's slices are known in advance.
#include <cstdint>
#include <utility>
#include <vector>

#include "tpipe/plan/table_latency.hpp"

namespace tpipe_test {

//! A unit whose time does not depend on the rows (a device with rows to spare) and grows with
//! the tokens: token slices shorten the pipeline's fill, microbatches do not. Sequences of 16
//! tokens, up to 4 rows; attending to c earlier tokens costs a little more.
inline tpipe::table_latency rows_free_unit()
{
    std::vector<tpipe::latency_sample> s;
    for (std::int64_t b = 1; b <= 4; ++b)
        for (std::int64_t t = 4; t <= 16; t += 4)
            for (std::int64_t c = 0; c + t <= 16; c += 4)
                s.push_back({b, t, c, 1e-4 + 1e-4 * static_cast<double>(t) + 1e-6 * static_cast<double>(t * c)});
    return tpipe::table_latency(std::move(s));
}

} // namespace tpipe_test
