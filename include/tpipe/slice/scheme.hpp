#pragma once
// A scheme is the ordered set of units of one iteration: microbatches (row slices), each cut
// into ascending, contiguous token slices. Slicers produce schemes; schedules consume them.
#include <cstdint>
#include <string>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"

namespace tpipe {

//! Shape of one iteration's batch: rows (sequences) and tokens per row.
struct batch_shape {
    std::int64_t rows = 1;
    std::int64_t seq_len = 1;
    friend constexpr bool operator==(const batch_shape&, const batch_shape&) = default;
};

class scheme {
public:
    //! One microbatch: its rows and its token cut points 0 = c0 < c1 < ... < cn = seq_len.
    struct microbatch {
        std::int64_t row_begin = 0;
        std::int64_t row_end = 1;
        std::vector<std::int64_t> cuts{0, 1};
        friend constexpr bool operator==(const microbatch&, const microbatch&) = default;
    };

    constexpr scheme() = default;

    //! Builds a scheme, refusing empty microbatches and non-ascending cuts.
    constexpr explicit scheme(std::vector<microbatch> mbs) : mbs_(std::move(mbs))
    {
        if (mbs_.empty()) detail::refuse("a scheme needs at least one microbatch");
        offsets_.assign(1, 0);
        offsets_.reserve(mbs_.size() + 1);
        for (const auto& m : mbs_) {
            if (m.row_end <= m.row_begin)
                detail::refuse("every microbatch needs at least one row (row_end > row_begin)");
            if (m.cuts.size() < 2 || m.cuts.front() != 0)
                detail::refuse("token cuts must start at 0 and contain at least one slice");
            for (std::size_t i = 1; i < m.cuts.size(); ++i)
                if (m.cuts[i] <= m.cuts[i - 1])
                    detail::refuse("token cuts must be strictly ascending (every slice has >= 1 token)");
            offsets_.push_back(offsets_.back() + static_cast<int>(m.cuts.size()) - 1);
        }
    }

    constexpr int microbatches() const { return static_cast<int>(mbs_.size()); }
    constexpr int slices(int mb) const { return static_cast<int>(mbs_[mb].cuts.size()) - 1; }
    constexpr int max_slices() const
    {
        int s = 0;
        for (int m = 0; m < microbatches(); ++m) s = s < slices(m) ? slices(m) : s;
        return s;
    }
    //! Total number of units, and a dense index (microbatch-major, slices ascending).
    constexpr int units() const { return offsets_.empty() ? 0 : offsets_.back(); }
    constexpr int index(int mb, int slice) const { return offsets_[mb] + slice; }
    constexpr bool contains(int mb, int slice) const
    {
        return mb >= 0 && mb < microbatches() && slice >= 0 && slice < slices(mb);
    }
    constexpr std::int64_t seq_len(int mb) const { return mbs_[mb].cuts.back(); }

    constexpr unit at(int mb, int slice) const
    {
        const auto& m = mbs_[mb];
        return unit{mb, slice, m.row_begin, m.row_end, m.cuts[slice], m.cuts[slice + 1]};
    }
    //! Unit at dense index i.
    constexpr unit at(int i) const
    {
        // offsets_ is ascending: the microbatch is the last one whose first unit is <= i.
        int lo = 0, hi = microbatches() - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (offsets_[mid] <= i) lo = mid;
            else hi = mid - 1;
        }
        return at(lo, i - offsets_[lo]);
    }

    constexpr const std::vector<microbatch>& parts() const { return mbs_; }
    //! True when every microbatch uses the same token cut (a grid a runtime executes as is).
    constexpr bool shared_cut() const
    {
        for (const auto& m : mbs_)
            if (m.cuts != mbs_.front().cuts) return false;
        return true;
    }

    friend constexpr bool operator==(const scheme& a, const scheme& b) { return a.mbs_ == b.mbs_; }

private:
    std::vector<microbatch> mbs_{microbatch{}};
    std::vector<int> offsets_{0, 1};
};

} // namespace tpipe
