#pragma once
// CSV form of a program, as PyTorch's pipelining reads and writes it: no header, row r lists
// rank r's actions in order, comma-separated. Works for compute-only and lowered programs.
// Reading infers the stage->rank placement and the units (microbatches, slices) from the actions.
#include <algorithm>
#include <sstream>
#include <string>
#include <string_view>

#include "tpipe/schedule/program.hpp"

namespace tpipe {

inline std::string to_csv(const program& p)
{
    std::string out;
    for (const auto& row : p.actions) {
        for (std::size_t i = 0; i < row.size(); ++i) {
            if (i) out += ',';
            out += to_string(row[i]);
        }
        out += '\n';
    }
    return out;
}

//! Parses a program from CSV. Empty cells (PyTorch's idle slots) are skipped. Units get one row
//! and one token each, since the CSV does not carry their extents.
inline program from_csv(std::string_view text)
{
    program p;
    p.actions.clear();
    std::vector<int> placement;
    std::vector<int> slices;  // per microbatch: highest slice + 1
    std::size_t line_no = 0, pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        const int rank = static_cast<int>(p.actions.size());
        auto& row = p.actions.emplace_back();
        std::size_t c = 0;
        while (c <= line.size()) {
            std::size_t comma = line.find(',', c);
            if (comma == std::string_view::npos) comma = line.size();
            std::string_view cell = line.substr(c, comma - c);
            while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
            while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
            c = comma + 1;
            if (cell.empty()) continue;
            action a;
            try {
                a = parse_action(cell);
            } catch (const parse_error& e) {
                throw parse_error("CSV line " + std::to_string(line_no) + ": " + e.what());
            }
            if (static_cast<int>(placement.size()) <= a.stage) placement.resize(a.stage + 1, -1);
            if (is_compute(a.kind)) {
                if (placement[a.stage] != -1 && placement[a.stage] != rank)
                    throw parse_error("CSV line " + std::to_string(line_no) + ": stage " + std::to_string(a.stage) +
                                      " appears on rank " + std::to_string(placement[a.stage]) + " and on rank " +
                                      std::to_string(rank) + "; a stage lives on exactly one rank");
                placement[a.stage] = rank;
            }
            if (static_cast<int>(slices.size()) <= a.microbatch) slices.resize(a.microbatch + 1, 0);
            slices[a.microbatch] = std::max(slices[a.microbatch], a.slice + 1);
            row.push_back(a);
        }
    }
    if (p.actions.empty()) throw parse_error("CSV: no ranks (the file is empty)");
    p.ranks = static_cast<int>(p.actions.size());
    for (std::size_t s = 0; s < placement.size(); ++s)
        if (placement[s] == -1)
            throw parse_error("CSV: stage " + std::to_string(s) + " has no compute action, so its rank is unknown");
    if (placement.empty()) throw parse_error("CSV: no actions");
    p.stage_rank = placement;
    std::vector<scheme::microbatch> mbs;
    for (std::size_t m = 0; m < slices.size(); ++m) {
        if (slices[m] == 0) slices[m] = 1;  // a microbatch never mentioned: validation reports it missing
        scheme::microbatch mb{static_cast<std::int64_t>(m), static_cast<std::int64_t>(m) + 1, {}};
        for (int s = 0; s <= slices[m]; ++s) mb.cuts.push_back(s);
        mbs.push_back(std::move(mb));
    }
    p.units = scheme(std::move(mbs));
    return p;
}

} // namespace tpipe
