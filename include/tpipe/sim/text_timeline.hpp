#pragma once
// A timeline as a text grid for terminals: one line per rank, one cell per time quantum (the
// shortest compute); an action shows its label in its first cell and dashes while it lasts; '.'
// is idle. The label names the stage too (`2F0`) as soon as some rank holds several stages.
// A timeline wider than `max_width` wraps into bands, each headed by the time it starts at. The
// grid is coarsened only beyond 4096 columns or when its text would pass `max_bytes` (a cost
// ratio of 1e6 would print megabytes, 1e9 would not fit in memory): then the quantum grows to
// fit, short actions share cells, and a first line says so.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "tpipe/sim/timeline.hpp"

namespace tpipe {

inline std::string text_timeline(const std::vector<timed_action>& events, int ranks, int max_width = 150,
                                 std::size_t max_bytes = std::size_t{1} << 20)
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
    if (static_cast<double>(ranks) * 16 * 8 > static_cast<double>(max_bytes))  // not even 16 columns a rank fit
        return "(the text timeline of " + std::to_string(ranks) + " ranks is not drawn: it would pass " +
               std::to_string(max_bytes) + " bytes)\n";
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
    // Columns, in doubles first: makespan / quantum may be huge or inf (a cost of 1e-320), and a
    // double beyond size_t's range does not convert.
    const double most = std::min(4096.0, std::max(16.0, static_cast<double>(max_bytes) /
                                                            (static_cast<double>(std::max(ranks, 1)) *
                                                             static_cast<double>(cell + 1))));
    std::string note;
    if (!(std::ceil(makespan / quantum - 1e-9) <= most)) {
        const double fine = quantum;
        quantum = makespan / most;
        char line[160];
        std::snprintf(line, sizeof line, "(coarsened: one cell is %g, not the shortest compute %g, to keep %.0f columns)\n",
                      quantum, fine, most);
        note = line;
    }
    const auto columns = static_cast<std::size_t>(std::min(most, std::ceil(makespan / quantum - 1e-9)));
    std::vector<std::string> rows(ranks, std::string(columns * cell, ' '));
    for (auto& r : rows)
        for (std::size_t c = 0; c < columns; ++c) r[c * cell] = '.';
    for (const auto& e : events) {
        if (!is_compute(e.what.kind)) continue;
        const std::string l = label(e.what);
        const auto first = static_cast<std::size_t>(
            std::min(static_cast<double>(columns - 1), std::max(0.0, std::floor(e.start / quantum + 1e-9))));
        auto last = static_cast<std::size_t>(std::min(static_cast<double>(columns), std::max(0.0, std::ceil(e.end / quantum - 1e-9))));
        last = std::min(std::max(last, first + 1), columns);
        auto& row = rows[e.rank];
        for (std::size_t c = first; c < last; ++c)
            row.replace(c * cell, cell, c == first ? l + std::string(cell - l.size(), ' ') : std::string(cell - 1, '-') + " ");
    }
    const std::size_t band = std::max<std::size_t>(1, (static_cast<std::size_t>(std::max(max_width, 9)) - 8) / cell);
    std::string out = note;
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
