#pragma once
// An elastic_model from JSON: the fields of elastic_model by name, units as an array of
// {"name", "params", "block", "forward_seconds"?}. Unknown keys are refused (a typo would
// otherwise silently keep a default).
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include "tpipe/core/checked.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/elastic/elastic_model.hpp"

namespace tpipe::elastic {

inline elastic_model elastic_model_from_json(const json::value& v)
{
    const auto& o = v.as_object("elastic model");
    static const std::set<std::string> known{
        "name", "layers", "units", "samples_per_epoch", "batch", "activation_bytes", "seconds_per_param",
        "backward_factor", "per_microbatch_seconds", "link_bandwidth", "link_latency", "allreduce_bandwidth",
        "gradient_bytes_per_param", "cache_seconds_per_sample", "host_bandwidth", "cache_budget_bytes",
        "disk_bandwidth", "nodes", "replan_seconds"};
    for (const auto& [k, _] : o)
        if (!known.count(k)) throw parse_error("elastic model: unknown key \"" + k + "\"");
    elastic_model m;
    auto number = [&](const char* k, double& out) {
        if (v.contains(k)) out = v.at(k).as_number(k);
    };
    // Whole numbers in their type's range, checked (1e30 or 4294967298 must not wrap, 1.7 must not truncate).
    auto whole = [](const json::value& x, const std::string& what, auto& out) {
        using T = std::remove_reference_t<decltype(out)>;
        try {
            out = checked_integer<T>("elastic model: \"" + what + "\"", x.as_number(what));
        } catch (const invalid_argument& e) {
            throw parse_error(e.what());
        }
    };
    auto integer = [&](const char* k, auto& out) {
        if (v.contains(k)) whole(v.at(k), k, out);
    };
    if (v.contains("name")) m.name = v.at("name").as_string("name");
    integer("layers", m.layers);
    integer("samples_per_epoch", m.samples_per_epoch);
    integer("batch", m.batch);
    integer("nodes", m.nodes);
    number("activation_bytes", m.activation_bytes);
    number("seconds_per_param", m.seconds_per_param);
    number("backward_factor", m.backward_factor);
    number("per_microbatch_seconds", m.per_microbatch_seconds);
    number("link_bandwidth", m.link_bandwidth);
    number("link_latency", m.link_latency);
    number("allreduce_bandwidth", m.allreduce_bandwidth);
    number("gradient_bytes_per_param", m.gradient_bytes_per_param);
    number("cache_seconds_per_sample", m.cache_seconds_per_sample);
    number("host_bandwidth", m.host_bandwidth);
    number("cache_budget_bytes", m.cache_budget_bytes);
    number("disk_bandwidth", m.disk_bandwidth);
    number("replan_seconds", m.replan_seconds);
    for (const auto& u : v.at("units").as_array("units")) {
        for (const auto& [k, _] : u.as_object("unit"))
            if (k != "name" && k != "params" && k != "block" && k != "forward_seconds")
                throw parse_error("elastic model unit: unknown key \"" + k + "\"");
        elastic_unit x;
        if (u.contains("name")) x.name = u.at("name").as_string("unit name");
        x.params = u.at("params").as_number("unit params");
        whole(u.at("block"), "block", x.block);
        if (u.contains("forward_seconds")) {  // absent: derived from params; present: a time, so >= 0
            x.forward_seconds = u.at("forward_seconds").as_number("forward_seconds");
            if (!(x.forward_seconds >= 0))
                throw parse_error("elastic model unit: \"forward_seconds\" must be >= 0, got " +
                                  std::to_string(x.forward_seconds) + " (leave it out to derive it from params)");
        }
        m.units.push_back(std::move(x));
    }
    m.validate();
    return m;
}

inline elastic_model load_elastic_model(const std::string& path)
{
    auto m = elastic_model_from_json(json::parse(read_file(path, "elastic model file")));
    if (m.name.empty()) m.name = path;
    return m;
}

} // namespace tpipe::elastic
