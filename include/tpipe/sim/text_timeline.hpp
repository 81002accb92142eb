#pragma once
// A timeline as a text grid for terminals: one line per rank, one cell per time quantum; an
// action shows its label in its first cell and dashes while it lasts; '.' is idle.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tpipe/sim/timeline.hpp"

namespace tpipe {

inline std::string text_timeline(const std::vector<timed_action>& events, int ranks, int max_width = 150)
{
    double makespan = 0, quantum = 0;
    std::size_t label = 1;
    for (const auto& e : events) {
        if (!is_compute(e.what.kind)) continue;
        makespan = std::max(makespan, e.end);
        const double d = e.end - e.start;
        if (d > 0 && (quantum == 0 || d < quantum)) quantum = d;
        std::string l = to_string(e.what);
        label = std::max(label, l.size() - l.find_first_not_of("0123456789"));
    }
    if (makespan <= 0) return "(empty timeline)\n";
    const std::size_t cell = label + 1;
    std::size_t columns = static_cast<std::size_t>(std::ceil(makespan / quantum - 1e-9));
    const std::size_t max_columns = std::max<std::size_t>(1, (static_cast<std::size_t>(max_width) - 8) / cell);
    if (columns > max_columns) {
        columns = max_columns;
        quantum = makespan / static_cast<double>(columns);
    }
    std::vector<std::string> rows(ranks, std::string(columns * cell, ' '));
    for (auto& r : rows)
        for (std::size_t c = 0; c < columns; ++c) r[c * cell] = '.';
    for (const auto& e : events) {
        if (!is_compute(e.what.kind)) continue;
        std::string l = to_string(e.what);
        l = l.substr(l.find_first_not_of("0123456789"));  // the rank's row already says the stage
        const auto first = static_cast<std::size_t>(std::floor(e.start / quantum + 1e-9));
        auto last = static_cast<std::size_t>(std::ceil(e.end / quantum - 1e-9));
        last = std::min(std::max(last, first + 1), columns);
        auto& row = rows[e.rank];
        for (std::size_t c = first; c < last; ++c)
            row.replace(c * cell, cell, c == first ? l + std::string(cell - l.size(), ' ') : std::string(cell - 1, '-') + " ");
    }
    std::string out;
    for (int r = 0; r < ranks; ++r) {
        std::string name = "rank " + std::to_string(r);
        out += name + std::string(name.size() < 8 ? 8 - name.size() : 1, ' ') + rows[r] + "\n";
    }
    return out;
}

} // namespace tpipe
