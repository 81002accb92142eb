#pragma once
// The record of one re-plan, written by the planner (tpipe-plan elastic) and by training
// (train_gpt --elastic) alike, one JSON line each, so that predicted and measured runs can be
// compared line by line.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tpipe/core/json.hpp"

namespace tpipe::elastic {

struct replan_record {
    //! One microbatch of a token-sliced (TeraPipe) plan: its rows and its token slices' lengths.
    struct microbatch_slices {
        std::int64_t rows = 1;
        std::vector<std::int64_t> tokens;
        friend bool operator==(const microbatch_slices&, const microbatch_slices&) = default;
    };
    int epoch = 0;                //!< the interval the plan starts
    int frozen = 0;               //!< frozen layers (blocks), not units
    int stages = 1;               //!< pipeline length K
    int replicas = 1;             //!< data-parallel pipelines
    int microbatches = 1;         //!< per pipeline iteration
    std::vector<int> cuts;        //!< stage boundaries over the pipelined units (may be empty)
    bool cached = false;          //!< the frozen prefix's outputs come from AutoCache
    double predicted_throughput = 0;                  //!< samples per second, from the model
    std::optional<double> measured_throughput;        //!< samples per second, when measured
    //! Token slices of each microbatch when TeraPipe slices run inside the pipeline (empty:
    //! microbatches of whole sequences); written as the key "slices" only when not empty.
    std::vector<microbatch_slices> slices;

    json::value to_json() const
    {
        json::array c;
        for (int x : cuts) c.emplace_back(x);
        json::object o{{"epoch", epoch},
                       {"frozen", frozen},
                       {"stages", stages},
                       {"replicas", replicas},
                       {"microbatches", microbatches},
                       {"cuts", std::move(c)},
                       {"cached", cached},
                       {"predicted_throughput", predicted_throughput},
                       {"measured_throughput", measured_throughput ? json::value(*measured_throughput) : json::value()}};
        if (!slices.empty()) {
            json::array mbs;
            for (const auto& m : slices) {
                json::array t;
                for (auto l : m.tokens) t.emplace_back(static_cast<double>(l));
                mbs.emplace_back(json::object{{"rows", static_cast<double>(m.rows)}, {"tokens", std::move(t)}});
            }
            o["slices"] = std::move(mbs);
        }
        return o;
    }
    //! One line of JSON (no trailing newline); keys in alphabetical order.
    std::string to_json_line() const { return json::dump(to_json()); }

    //! The record a to_json_line wrote (refuses a line missing a key or with a wrong type).
    static replan_record from_json(const json::value& v)
    {
        auto integer = [&](const char* k) { return static_cast<int>(v.at(k).as_number(k)); };
        replan_record r;
        r.epoch = integer("epoch");
        r.frozen = integer("frozen");
        r.stages = integer("stages");
        r.replicas = integer("replicas");
        r.microbatches = integer("microbatches");
        if (v.contains("cuts"))
            for (const auto& x : v.at("cuts").as_array("cuts")) r.cuts.push_back(static_cast<int>(x.as_number("cut")));
        if (v.contains("cached")) r.cached = v.at("cached").as_bool("cached");
        r.predicted_throughput = v.at("predicted_throughput").as_number("predicted_throughput");
        if (v.contains("slices"))
            for (const auto& m : v.at("slices").as_array("slices")) {
                microbatch_slices x;
                x.rows = static_cast<std::int64_t>(m.at("rows").as_number("rows"));
                for (const auto& t : m.at("tokens").as_array("tokens")) x.tokens.push_back(static_cast<std::int64_t>(t.as_number("token slice")));
                r.slices.push_back(std::move(x));
            }
        if (v.contains("measured_throughput") && !v.at("measured_throughput").is_null())
            r.measured_throughput = v.at("measured_throughput").as_number("measured_throughput");
        return r;
    }
    friend bool operator==(const replan_record&, const replan_record&) = default;
};

} // namespace tpipe::elastic
