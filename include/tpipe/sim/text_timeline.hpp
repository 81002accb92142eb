#pragma once
// A timeline as a text grid for terminals: one line per rank, one cell per time quantum (the
// shortest compute); an action shows its label in its first cell and dashes while it lasts; '.'
// is idle. The label names the stage too (`2F0`) as soon as some rank holds several stages.
// The grid is never coarsened — that would make actions share a cell and hide each other — so
// a timeline wider than `max_width` wraps into bands, each headed by the time it starts at.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tpipe/sim/timeline.hpp"

namespace tpipe {

inline std::string text_timeline(const std::vector<timed_action>& events, int ranks, int max_width = 150)
{
    double makespan = 0, quantum = 0;
    std::vector<std::set<int>> stages(ranks);
    for (const auto& e : events) {
        if (!is_compute(e.what.kind)) continue;
        makespan = std::max(makespan, e.end);
        const double d = e.end - e.start;
        if (d > 0 && (quantum == 0 || d < quantum)) quantum = d;
        if (e.rank >= 0 && e.rank < ranks) stages[e.rank].insert(e.what.stage);
    }
    if (makespan <= 0) return "(empty timeline)\n";
    bool several = false;
    for (const auto& s : stages) several = several || s.size() > 1;
    auto label = [&](const action& a) {
        std::string l = to_string(a);
        return several ? l : l.substr(l.find_first_not_of("0123456789"));  // the row already says the stage
    };
    std::size_t width = 1;
    for (const auto& e : events)
        if (is_compute(e.what.kind)) width = std::max(width, label(e.what).size());
    const std::size_t cell = width + 1;
    const auto columns = static_cast<std::size_t>(std::ceil(makespan / quantum - 1e-9));
    std::vector<std::string> rows(ranks, std::string(columns * cell, ' '));
    for (auto& r : rows)
        for (std::size_t c = 0; c < columns; ++c) r[c * cell] = '.';
    for (const auto& e : events) {
        if (!is_compute(e.what.kind)) continue;
        const std::string l = label(e.what);
        const auto first = static_cast<std::size_t>(std::floor(e.start / quantum + 1e-9));
        auto last = static_cast<std::size_t>(std::ceil(e.end / quantum - 1e-9));
        last = std::min(std::max(last, first + 1), columns);
        auto& row = rows[e.rank];
        for (std::size_t c = first; c < last; ++c)
            row.replace(c * cell, cell, c == first ? l + std::string(cell - l.size(), ' ') : std::string(cell - 1, '-') + " ");
    }
    const std::size_t band = std::max<std::size_t>(1, (static_cast<std::size_t>(std::max(max_width, 9)) - 8) / cell);
    std::string out;
    for (std::size_t from = 0; from < columns; from += band) {
        if (columns > band) {
            char head[64];
            std::snprintf(head, sizeof head, "t = %g\n", static_cast<double>(from) * quantum);
            out += head;
        }
        for (int r = 0; r < ranks; ++r) {
            std::string name = "rank " + std::to_string(r);
            out += name + std::string(name.size() < 8 ? 8 - name.size() : 1, ' ') +
                   rows[r].substr(from * cell, std::min(band, columns - from) * cell) + "\n";
        }
    }
    return out;
}

} // namespace tpipe
