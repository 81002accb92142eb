#pragma once
// Draws a timeline as an SVG picture: one row per rank, time to the right, a box per compute
// coloured by kind (F, B, I, W) and labelled with its microbatch (and slice).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "tpipe/sim/timeline.hpp"

namespace tpipe {

inline std::string svg_timeline(const std::vector<timed_action>& events, int ranks, const std::string& title = "")
{
    double makespan = 0;
    for (const auto& e : events) makespan = std::max(makespan, e.end);
    if (makespan <= 0) makespan = 1;
    const double left = 64, width = 960, row = 26, top = title.empty() ? 10 : 34;
    const double height = top + ranks * row + 44;
    auto num = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", v);
        return std::string(buf);
    };
    auto colour = [](op k) {
        switch (k) {
        case op::F: return "#4c78a8";
        case op::B: return "#54a24b";
        case op::I: return "#72b7b2";
        case op::W: return "#b279a2";
        default: return "#999999";
        }
    };
    std::string s = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(left + width + 16) + "\" height=\"" +
                    num(height) + "\" font-family=\"sans-serif\" font-size=\"11\">\n";
    s += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
    if (!title.empty()) s += "<text x=\"" + num(left) + "\" y=\"20\" font-size=\"14\">" + title + "</text>\n";
    for (int r = 0; r < ranks; ++r) {
        const double y = top + r * row;
        s += "<text x=\"4\" y=\"" + num(y + row * 0.65) + "\">rank " + std::to_string(r) + "</text>\n";
        s += "<rect x=\"" + num(left) + "\" y=\"" + num(y) + "\" width=\"" + num(width) + "\" height=\"" +
             num(row - 4) + "\" fill=\"#f2f2f2\"/>\n";
    }
    for (const auto& e : events) {
        if (!is_compute(e.what.kind)) continue;
        const double x = left + e.start / makespan * width, w = std::max(0.5, (e.end - e.start) / makespan * width);
        const double y = top + e.rank * row;
        s += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" + num(row - 4) +
             "\" fill=\"" + colour(e.what.kind) + "\" stroke=\"white\" stroke-width=\"0.5\"><title>" +
             to_string(e.what) + "</title></rect>\n";
        std::string label = std::to_string(e.what.microbatch);
        if (e.what.slice) label += "." + std::to_string(e.what.slice);
        if (w >= 7.0 * static_cast<double>(label.size()))
            s += "<text x=\"" + num(x + w / 2) + "\" y=\"" + num(y + row * 0.58) +
                 "\" fill=\"white\" text-anchor=\"middle\">" + label + "</text>\n";
    }
    const double axis = top + ranks * row + 4;
    for (int i = 0; i <= 5; ++i) {
        const double x = left + width * i / 5.0;
        s += "<line x1=\"" + num(x) + "\" y1=\"" + num(axis) + "\" x2=\"" + num(x) + "\" y2=\"" + num(axis + 5) +
             "\" stroke=\"black\"/><text x=\"" + num(x) + "\" y=\"" + num(axis + 17) + "\" text-anchor=\"middle\">" +
             num(makespan * i / 5.0) + "</text>\n";
    }
    double lx = left;
    for (op k : {op::F, op::B, op::I, op::W}) {
        s += "<rect x=\"" + num(lx) + "\" y=\"" + num(axis + 24) + "\" width=\"10\" height=\"10\" fill=\"" + colour(k) +
             "\"/><text x=\"" + num(lx + 14) + "\" y=\"" + num(axis + 33) + "\">" + std::string(name(k)) + "</text>\n";
        lx += 40;
    }
    return s + "</svg>\n";
}

} // namespace tpipe
