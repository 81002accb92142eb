#pragma once
// Exports a timeline as Chrome/Perfetto trace JSON (open it at ui.perfetto.dev or
// chrome://tracing): one track per rank for computes, one per rank for outgoing transfers and
// the other non-compute actions (waits, UNSHARD, REDUCE_GRAD, ...).
// Written straight to a stream: traces of large programs hold millions of events.
#include <sstream>
#include <string>
#include <vector>

#include "tpipe/core/json.hpp"
#include "tpipe/sim/timeline.hpp"

namespace tpipe {

inline std::string chrome_trace(const std::vector<timed_action>& events, int ranks,
                                const std::string& title = "tpipe")
{
    std::ostringstream os;
    auto number = [&](double v) { json::detail::write_number(os, v); };
    auto track = [&](int tid, const std::string& name) {
        os << ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":" << tid << ",\"args\":{\"name\":";
        json::detail::write_string(os, name);
        os << "}}";
    };
    os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,"
          "\"args\":{\"name\":";
    json::detail::write_string(os, title);
    os << "}}";
    for (int r = 0; r < ranks; ++r) {
        track(r, "rank " + std::to_string(r));
        track(ranks + r, "rank " + std::to_string(r) + " comm");
    }
    for (const auto& e : events) {
        if (e.what.kind == op::RECV_F || e.what.kind == op::RECV_B) continue;  // shown by the send
        const bool compute = is_compute(e.what.kind);
        os << ",\n{\"name\":\"" << to_string(e.what) << "\",\"cat\":\"" << name(e.what.kind)
           << "\",\"ph\":\"X\",\"pid\":0,\"tid\":" << (compute ? e.rank : ranks + e.rank) << ",\"ts\":";
        number(e.start * 1e6);
        os << ",\"dur\":";
        number((e.end - e.start) * 1e6);
        os << ",\"args\":{\"stage\":" << e.what.stage << ",\"microbatch\":" << e.what.microbatch
           << ",\"slice\":" << e.what.slice << "}}";
    }
    os << "\n]}\n";
    return os.str();
}

} // namespace tpipe
