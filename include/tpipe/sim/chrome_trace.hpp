#pragma once
// Exports a timeline as Chrome/Perfetto trace JSON (open it at ui.perfetto.dev or
// chrome://tracing): one track per rank for computes, one per rank for outgoing transfers.
#include <string>
#include <vector>

#include "tpipe/core/json.hpp"
#include "tpipe/sim/timeline.hpp"

namespace tpipe {

inline std::string chrome_trace(const std::vector<timed_action>& events, int ranks,
                                const std::string& title = "tpipe")
{
    json::array out;
    auto meta = [&](const char* what, int tid, const std::string& name) {
        out.push_back(json::object{{"name", what}, {"ph", "M"}, {"pid", 0}, {"tid", tid},
                                   {"args", json::object{{"name", name}}}});
    };
    out.push_back(json::object{{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                               {"args", json::object{{"name", title}}}});
    for (int r = 0; r < ranks; ++r) {
        meta("thread_name", r, "rank " + std::to_string(r));
        meta("thread_name", ranks + r, "rank " + std::to_string(r) + " sends");
    }
    for (const auto& e : events) {
        if (e.what.kind == op::RECV_F || e.what.kind == op::RECV_B) continue;  // shown by the send
        const bool compute = is_compute(e.what.kind);
        out.push_back(json::object{
            {"name", to_string(e.what)},
            {"cat", std::string(name(e.what.kind))},
            {"ph", "X"},
            {"pid", 0},
            {"tid", compute ? e.rank : ranks + e.rank},
            {"ts", e.start * 1e6},
            {"dur", (e.end - e.start) * 1e6},
            {"args", json::object{{"stage", e.what.stage}, {"microbatch", e.what.microbatch}, {"slice", e.what.slice}}},
        });
    }
    return json::dump(json::object{{"traceEvents", out}, {"displayTimeUnit", "ms"}});
}

} // namespace tpipe
