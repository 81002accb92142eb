#pragma once
// Slicers named by text, as trainers' --slicer flags spell them:
//   microbatch:M          M microbatches of whole sequences (GPipe)
//   tokens:l1,l2,...      the whole batch in token slices of those lengths (TeraPipe)
//   grid:M:l1,l2,...      M microbatches, each in those token slices
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/core/checked.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe {

namespace detail {
template <class T = std::int64_t>
T positive_in_spec(std::string_view spec, std::string_view text)
{
    return parse_integer<T>("slicer '" + std::string(spec) + "': '" + std::string(text) + "'", text, 1);
}
inline std::vector<std::int64_t> lengths_in_spec(std::string_view spec, std::string_view text)
{
    std::vector<std::int64_t> out;
    for (std::size_t at = 0;;) {
        const std::size_t comma = text.find(',', at);
        out.push_back(positive_in_spec(spec, text.substr(at, comma == std::string_view::npos ? comma : comma - at)));
        if (comma == std::string_view::npos) return out;
        at = comma + 1;
    }
}
} // namespace detail

//! The scheme that slicer `spec` (see above) makes of `shape`. Throws tpipe::invalid_argument
//! for a spec it does not know or that does not fit the shape.
inline tpipe::scheme scheme_from_spec(std::string_view spec, batch_shape shape)
{
    auto after = [&](std::string_view prefix) { return spec.substr(prefix.size()); };
    if (spec.starts_with("microbatch:"))
        return microbatch_slicer{detail::positive_in_spec<int>(spec, after("microbatch:"))}.scheme(shape);
    if (spec.starts_with("tokens:")) return token_slicer{detail::lengths_in_spec(spec, after("tokens:"))}.scheme(shape);
    if (spec.starts_with("grid:")) {
        const std::string_view rest = after("grid:");
        const std::size_t colon = rest.find(':');
        if (colon == std::string_view::npos)
            detail::refuse("slicer '" + std::string(spec) + "': grid needs grid:M:l1,l2,...");
        return grid_slicer{detail::positive_in_spec<int>(spec, rest.substr(0, colon)),
                           detail::lengths_in_spec(spec, rest.substr(colon + 1))}
            .scheme(shape);
    }
    detail::refuse("unknown slicer '" + std::string(spec) + "'; use microbatch:M, tokens:l1,l2,... or grid:M:l1,l2,...");
}

} // namespace tpipe
