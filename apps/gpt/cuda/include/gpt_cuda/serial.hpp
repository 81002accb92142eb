#pragma once
// The host executor of the CUDA GPT's kernel bodies (gpt_cuda/kernels.hpp): one row after another,
// each reduction a plain loop. It is what runs these bodies where there is no GPU: the CPU tests
// compare it with the CPU GPT's kernels. Slow and serial on purpose; not a CPU backend.
#include <cstdint>

#include "gpt_cuda/kernels.hpp"

namespace gpt::cuda {

struct serial_executor {
    static constexpr memory where = memory::host;

    //! One row: its reductions are loops over its columns.
    struct row_view {
        template <class F>
        auto sum(std::int64_t n, F f) const
        {
            decltype(f(0)) s = 0;
            for (std::int64_t c = 0; c < n; ++c) s += f(c);
            return s;
        }
        template <class F>
        auto max(std::int64_t n, F f) const
        {
            auto m = f(0);
            for (std::int64_t c = 1; c < n; ++c) m = f(c) > m ? f(c) : m;
            return m;
        }
        template <class F>
        void each(std::int64_t n, F f) const
        {
            for (std::int64_t c = 0; c < n; ++c) f(c);
        }
        template <class F>
        void once(F f) const
        {
            f();
        }
    };

    template <class Body>
    void rows(std::int64_t n, std::int64_t /*width*/, const Body& body)
    {
        row_view row;
        for (std::int64_t i = 0; i < n; ++i) body(row, i);
    }
    template <class Body>
    void elements(std::int64_t n, const Body& body)
    {
        for (std::int64_t e = 0; e < n; ++e) body(e);
    }
};

} // namespace gpt::cuda
