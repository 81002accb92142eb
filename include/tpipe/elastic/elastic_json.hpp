#pragma once
// An elastic_model from JSON: the fields of elastic_model by name, units as an array of
// {"name", "params", "block", "forward_seconds"?}. Unknown keys are refused (a typo would
// otherwise silently keep a default).
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>

#include "tpipe/core/json.hpp"
#include "tpipe/elastic/elastic_model.hpp"

namespace tpipe {

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
    auto integer = [&](const char* k, auto& out) {
        if (!v.contains(k)) return;
        const double d = v.at(k).as_number(k);
        if (d != static_cast<double>(static_cast<long long>(d)))
            throw parse_error(std::string("elastic model: \"") + k + "\" must be an integer");
        out = static_cast<std::remove_reference_t<decltype(out)>>(d);
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
        x.block = static_cast<int>(u.at("block").as_number("unit block"));
        if (u.contains("forward_seconds")) x.forward_seconds = u.at("forward_seconds").as_number("forward_seconds");
        m.units.push_back(std::move(x));
    }
    m.validate();
    return m;
}

inline elastic_model load_elastic_model(const std::string& path)
{
    std::ifstream in(path);
    if (!in) throw error("cannot read elastic model '" + path + "'");
    std::stringstream text;
    text << in.rdbuf();
    auto m = elastic_model_from_json(json::parse(text.str()));
    if (m.name.empty()) m.name = path;
    return m;
}

} // namespace tpipe
