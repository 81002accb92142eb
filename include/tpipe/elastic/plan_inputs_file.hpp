#pragma once
// The elastic planner's inputs as a file, recorded by one run and replayed by another, so that a
// run can be reproduced. The plans (freezing aside: cuts, pipeline depth, replicas, microbatches,
// token slices) are a function of the options and of what was measured on the machine at the
// moment: driver_options::measured (each unit's seconds) and, with TeraPipe slices,
// driver_options::slicing (each unit's token latency table). Measured again, those differ with
// the machine's load, and so may the plans and with them the trained bits. A run that replays
// them plans exactly what the recording run planned (doubles are written with 17 significant
// digits: they read back bit for bit).
//
//   tpipe::elastic::record_plan_inputs("plan.json", options);            // after measuring
//   tpipe::elastic::replay_plan_inputs("plan.json", options, units, g);  // instead of measuring
//
// The file: {"format": "tpipe-elastic-plan-inputs", "version": 1, "units": N,
//            "unit_seconds": {"forward": [N], "backward": [N], "update": [N], "reduce": [N] (the
//                             last two optional: the interval forecast's optimizer and all-reduce
//                             seconds; plans do not depend on them)},
//            "token_slicing": null | {"granularity": G, "tables": [N x [[b, s, c, seconds], ...]]}}
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tpipe/core/error.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/core/quote.hpp"
#include "tpipe/elastic/driver_options.hpp"

namespace tpipe::elastic {

inline constexpr const char* plan_inputs_format = "tpipe-elastic-plan-inputs";
inline constexpr int plan_inputs_version = 1;

//! o.measured and o.slicing as the file's JSON document.
inline json::value plan_inputs_json(const driver_options& o)
{
    json::value slicing;  // null: microbatches of whole sequences
    if (o.slicing) {
        json::array tables;
        for (const auto& t : o.slicing->units) {
            json::array rows;
            for (const auto& p : t.samples())
                rows.emplace_back(json::array{json::value(p.b), json::value(p.s), json::value(p.c), json::value(p.seconds)});
            tables.emplace_back(std::move(rows));
        }
        slicing = json::object{{"granularity", o.slicing->granularity}, {"tables", std::move(tables)}};
    }
    json::object seconds{{"forward", json::array(o.measured.forward.begin(), o.measured.forward.end())},
                         {"backward", json::array(o.measured.backward.begin(), o.measured.backward.end())}};
    for (const auto& [name, times] : optional_times(o.measured))
        if (!times->empty()) seconds.emplace(name, json::array(times->begin(), times->end()));
    return json::object{{"format", plan_inputs_format},
                        {"version", plan_inputs_version},
                        {"units", o.measured.forward.size()},
                        {"unit_seconds", std::move(seconds)},
                        {"token_slicing", std::move(slicing)}};
}

//! Writes o's plan inputs to `path` (created or replaced); refuses options without unit times.
inline void record_plan_inputs(const std::string& path, const driver_options& o)
{
    if (o.measured.forward.empty() || o.measured.forward.size() != o.measured.backward.size())
        throw invalid_argument("record_plan_inputs: " + std::to_string(o.measured.forward.size()) + " forward and " +
                               std::to_string(o.measured.backward.size()) +
                               " backward unit times; measure every unit before recording them");
    write_file(path, json::dump(plan_inputs_json(o)) + "\n", "plan inputs file");
}

//! Sets o.measured and o.slicing from a plan_inputs_json document. `units`: the model's unit
//! count; `granularity`: the run's token granularity (0: it does not slice tokens). Refuses, with
//! a sentence naming `where` and the value, a document of another format, another unit count,
//! times that are negative or not finite, and token tables the run would not use or lacks.
inline void replay_plan_inputs(const json::value& doc, driver_options& o, std::size_t units, std::int64_t granularity,
                               const std::string& where)
{
    const auto refuse = [&](const std::string& what) { throw invalid_argument(where + ": " + what); };
    driver_options got;
    try {
        if (!doc.contains("format") || doc.at("format").as_string("format") != plan_inputs_format)
            refuse(std::string("not a plan inputs file (its \"format\" must be \"") + plan_inputs_format +
                   "\"; record one with record_plan_inputs)");
        const double version = doc.at("version").as_number("version");
        if (version != plan_inputs_version)
            refuse("version " + json::dump(version) + " of the plan inputs format; this build reads version " +
                   std::to_string(plan_inputs_version));
        const auto seconds = [&](const json::value& v, const std::string& what) {
            std::vector<double> out;
            for (const auto& x : v.as_array(what)) {
                const double s = x.as_number(what);
                if (!std::isfinite(s) || s < 0)
                    refuse(what + " holds " + json::dump(s) + "; unit times must be finite and >= 0 seconds");
                out.push_back(s);
            }
            if (out.size() != units)
                refuse(what + " has " + std::to_string(out.size()) + " unit times; this model has " +
                       std::to_string(units) + " units (record the plan inputs with this model)");
            return out;
        };
        const auto& u = doc.at("unit_seconds");
        got.measured.forward = seconds(u.at("forward"), "unit_seconds.forward");
        got.measured.backward = seconds(u.at("backward"), "unit_seconds.backward");
        if (u.contains("forward_fixed") != u.contains("backward_fixed"))
            refuse("unit_seconds holds one of forward_fixed and backward_fixed; give both or neither");
        for (const auto& [name, times] : optional_times(got.measured))
            if (u.contains(name)) *times = seconds(u.at(name), std::string("unit_seconds.") + name);
        const json::value& ts = doc.contains("token_slicing") ? doc.at("token_slicing") : json::value();
        if (ts.is_null() != (granularity == 0)) {
            if (granularity == 0)
                refuse("it holds token latency tables (recorded by a run with TeraPipe slices); this run does not slice "
                       "tokens: replay it with TeraPipe slices (a granularity above 0), or record this run's inputs");
            refuse("it holds no token latency tables (recorded by a run without TeraPipe slices); this run slices tokens "
                   "with granularity " + std::to_string(granularity) + ": replay it without TeraPipe slices, or record "
                   "this run's inputs");
        }
        if (!ts.is_null()) {
            token_slicing s;
            s.granularity = static_cast<std::int64_t>(ts.at("granularity").as_number("token_slicing.granularity"));
            if (s.granularity != granularity)
                refuse("its token latency tables were profiled for granularity " + std::to_string(s.granularity) +
                       "; this run slices with granularity " + std::to_string(granularity) +
                       " (slice with the recorded run's granularity)");
            const auto& tables = ts.at("tables").as_array("token_slicing.tables");
            if (tables.size() != units)
                refuse("token_slicing.tables has " + std::to_string(tables.size()) + " tables; this model has " +
                       std::to_string(units) + " units");
            for (const auto& t : tables) {
                std::vector<latency_sample> samples;
                for (const auto& p : t.as_array("a token latency table")) {
                    const auto& q = p.as_array("a token latency sample [b, s, c, seconds]");
                    if (q.size() != 4) refuse("a token latency sample has " + std::to_string(q.size()) + " numbers, not 4 [b, s, c, seconds]");
                    const auto whole = [&](std::size_t i) { return static_cast<std::int64_t>(q[i].as_number("b, s, c")); };
                    samples.push_back({.b = whole(0), .s = whole(1), .c = whole(2), .seconds = q[3].as_number("seconds")});
                }
                try {
                    s.units.emplace_back(std::move(samples));
                } catch (const invalid_argument& e) {  // the table's refusal names the point
                    refuse(std::string("unit ") + std::to_string(s.units.size()) + "'s token latency table: " + e.what());
                }
            }
            got.slicing = std::move(s);
        }
    } catch (const parse_error& e) {
        refuse(std::string("cannot be read as plan inputs: ") + e.what());
    }
    o.measured = std::move(got.measured);
    o.slicing = std::move(got.slicing);
}

//! replay_plan_inputs of the file at `path` (see above).
inline void replay_plan_inputs(const std::string& path, driver_options& o, std::size_t units, std::int64_t granularity)
{
    const std::string where = "plan inputs file " + quote(path);
    json::value doc;
    try {
        doc = json::parse(read_file(path, "plan inputs file"));
    } catch (const parse_error& e) {
        throw invalid_argument(where + " is not JSON: " + e.what());
    }
    replay_plan_inputs(doc, o, units, granularity, where);
}

} // namespace tpipe::elastic
