#pragma once
// Latency models as JSON, strictly read (unknown keys and wrong types are refused by name):
//   {"kind": "polynomial", "coefficients": {"1": 2e-3, "bs": 1e-6, "bsc": 1e-10}}   (missing terms are 0)
//   {"kind": "table", "samples": [{"b": 1, "s": 128, "c": 0, "seconds": 0.0012}, ...]}
//   {"kind": "analytic",
//    "model":  "gpt3-175b" | {"layers": 96, "hidden": 12288, "heads": 96, "vocab": 50257},
//    "device": "v100" | {"peak_flops": 1.25e14, "memory_bandwidth": 9e11, "intra_node_bandwidth": 1.5e11,
//                        "kernel_overhead": 5e-6, "matmul_efficiency": 0.7, "memory_efficiency": 0.8,
//                        "sm_count": 80, "gemm_tile": 128, "all_reduce_latency": 2e-5,
//                        "host_op_overhead": 3e-5},
//                       (an object needs peak_flops and memory_bandwidth; the rest default to
//                        intra_node_bandwidth = memory_bandwidth, efficiencies 1, sm_count 0 = no
//                        wave quantisation, gemm_tile 128, overheads and latencies 0)
//    "link":   "eth-25g" | {"bandwidth": 3.125e9, "latency": 1e-4, "efficiency": 0.75},
//              (optional with a device preset: its usual link; required with a device object)
//    "layers_per_stage": 2,        (optional: ceil(layers / stages) of the plan)
//    "precision_bytes": 2, "tensor_parallel": 1, "with_head": false,
//    "form": "calibrated", "gradient_bytes": 2}   (optional, these defaults)
// Preset names: models gpt3-1b, gpt3-13b, gpt3-44b, gpt3-175b; devices v100, a100, h100, h200;
// links eth-25g, ib-hdr, ib-ndr.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string>

#include "tpipe/core/checked.hpp"
#include "tpipe/core/error.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/plan/analytic_latency.hpp"
#include "tpipe/plan/latency_model.hpp"
#include "tpipe/plan/polynomial_latency.hpp"
#include "tpipe/plan/presets.hpp"
#include "tpipe/plan/table_latency.hpp"

namespace tpipe {

//! What a model file may leave to the plan: the stage count sets an analytic preset's
//! layers per stage.
struct latency_context {
    int stages = 1;
};

namespace detail::latency_json {

inline void only_keys(const json::object& o, std::initializer_list<const char*> allowed, const std::string& where)
{
    for (const auto& [key, v] : o) {
        bool ok = false;
        for (const char* a : allowed) ok = ok || key == a;
        if (!ok) {
            std::string list;
            for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
            throw parse_error(where + ": unknown key \"" + key + "\"; expected one of " + list);
        }
    }
}

inline double number(const json::value& v, const std::string& what) { return v.as_number(what); }

//! A whole number of type T in [lo, hi] (never a wrapped or truncated cast).
template <class T = std::int64_t>
T integer(const json::value& v, const std::string& what, T lo = std::numeric_limits<T>::min(),
          T hi = std::numeric_limits<T>::max())
{
    const double d = v.as_number(what);
    try {
        return checked_integer<T>(what, d, lo, hi);
    } catch (const invalid_argument& e) {
        throw parse_error(e.what());
    }
}

inline double optional_number(const json::object& o, const char* key, double fallback, const std::string& where)
{
    auto it = o.find(key);
    return it == o.end() ? fallback : number(it->second, where + "." + key);
}

inline transformer_shape model_shape(const json::value& v)
{
    if (v.is_string()) return presets::model(v.as_string());
    const auto& o = v.as_object("analytic \"model\" (a preset name or an object)");
    only_keys(o, {"name", "layers", "hidden", "heads", "vocab"}, "analytic model");
    transformer_shape m;
    m.layers = integer<int>(v.at("layers"), "model.layers", 1);
    m.hidden = integer(v.at("hidden"), "model.hidden");
    m.heads = integer<int>(v.at("heads"), "model.heads");
    m.vocab = integer(v.at("vocab"), "model.vocab");
    return m;
}

inline device_spec device(const json::value& v)
{
    if (v.is_string()) return presets::device(v.as_string());
    const auto& o = v.as_object("analytic \"device\" (a preset name or an object)");
    only_keys(o,
              {"name", "peak_flops", "memory_bandwidth", "intra_node_bandwidth", "kernel_overhead", "matmul_efficiency",
               "memory_efficiency", "sm_count", "gemm_tile", "all_reduce_latency", "host_op_overhead"},
              "analytic device");
    device_spec d;
    d.peak_flops = number(v.at("peak_flops"), "device.peak_flops");
    d.memory_bandwidth = number(v.at("memory_bandwidth"), "device.memory_bandwidth");
    d.intra_node_bandwidth = optional_number(o, "intra_node_bandwidth", d.memory_bandwidth, "device");
    d.kernel_overhead = optional_number(o, "kernel_overhead", 0.0, "device");
    d.matmul_efficiency = optional_number(o, "matmul_efficiency", 1.0, "device");
    d.memory_efficiency = optional_number(o, "memory_efficiency", 1.0, "device");
    if (o.contains("sm_count")) d.sm_count = integer<int>(v.at("sm_count"), "device.sm_count");
    if (o.contains("gemm_tile")) d.gemm_tile = integer<int>(v.at("gemm_tile"), "device.gemm_tile");
    d.all_reduce_latency = optional_number(o, "all_reduce_latency", 0.0, "device");
    d.host_op_overhead = optional_number(o, "host_op_overhead", 0.0, "device");
    return d;
}

inline link_spec link(const json::value& v)
{
    if (v.is_string()) return presets::link(v.as_string());
    const auto& o = v.as_object("analytic \"link\" (a preset name or an object)");
    only_keys(o, {"name", "bandwidth", "latency", "efficiency"}, "analytic link");
    link_spec l;
    l.bandwidth = number(v.at("bandwidth"), "link.bandwidth");
    l.latency = optional_number(o, "latency", 0.0, "link");
    l.efficiency = optional_number(o, "efficiency", 1.0, "link");
    return l;
}

} // namespace detail::latency_json

inline polynomial_latency polynomial_from_json(const json::value& doc)
{
    namespace lj = detail::latency_json;
    lj::only_keys(doc.as_object("polynomial model"), {"kind", "coefficients"}, "polynomial model");
    polynomial_latency p;
    for (const auto& [name, v] : doc.at("coefficients").as_object("\"coefficients\"")) {
        polynomial_latency::term t{};
        try {
            t = polynomial_latency::term_of(name);
        } catch (const invalid_argument& e) {
            throw parse_error(e.what());
        }
        p.set(t, lj::number(v, "coefficient \"" + name + "\""));
    }
    return p;
}

inline table_latency table_from_json(const json::value& doc)
{
    namespace lj = detail::latency_json;
    lj::only_keys(doc.as_object("table model"), {"kind", "samples"}, "table model");
    std::vector<latency_sample> samples;
    std::size_t i = 0;
    for (const auto& e : doc.at("samples").as_array("\"samples\"")) {
        const std::string where = "samples[" + std::to_string(i++) + "]";
        lj::only_keys(e.as_object(where), {"b", "s", "c", "seconds"}, where);
        samples.push_back({lj::integer(e.at("b"), where + ".b"), lj::integer(e.at("s"), where + ".s"),
                           lj::integer(e.at("c"), where + ".c"), lj::number(e.at("seconds"), where + ".seconds")});
    }
    return table_latency(std::move(samples));
}

inline analytic_latency analytic_from_json(const json::value& doc, const latency_context& ctx)
{
    namespace lj = detail::latency_json;
    const auto& o = doc.as_object("analytic model");
    lj::only_keys(o,
                  {"kind", "model", "device", "link", "layers_per_stage", "precision_bytes", "tensor_parallel",
                   "with_head", "form", "gradient_bytes"},
                  "analytic model");
    const transformer_shape shape = lj::model_shape(doc.at("model"));
    const device_spec dev = lj::device(doc.at("device"));
    // A device preset comes with its usual link; a device described field by field has none.
    if (!doc.contains("link") && !doc.at("device").is_string())
        throw parse_error("analytic model: a \"device\" object needs a \"link\": a preset name (eth-25g, ib-hdr, "
                          "ib-ndr) or {\"bandwidth\": bytes/s, \"latency\": s, \"efficiency\": 0..1}");
    const link_spec lnk = doc.contains("link") ? lj::link(doc.at("link")) : presets::default_link(dev);
    const int layers = doc.contains("layers_per_stage")
                           ? lj::integer<int>(doc.at("layers_per_stage"), "layers_per_stage", 1)
                           : presets::layers_per_stage(shape.layers, ctx.stages);
    analytic_latency::options opt;
    if (doc.contains("precision_bytes")) opt.precision_bytes = lj::integer<int>(doc.at("precision_bytes"), "precision_bytes");
    if (doc.contains("tensor_parallel")) opt.tensor_parallel = lj::integer<int>(doc.at("tensor_parallel"), "tensor_parallel");
    if (doc.contains("with_head")) opt.with_head = doc.at("with_head").as_bool("with_head");
    if (doc.contains("form")) {
        try {
            opt.form = analytic_form_of(doc.at("form").as_string("form"));
        } catch (const invalid_argument& e) {
            throw parse_error(e.what());
        }
    }
    if (doc.contains("gradient_bytes")) opt.gradient_bytes = lj::integer<int>(doc.at("gradient_bytes"), "gradient_bytes");
    return analytic_latency(shape, layers, dev, lnk, opt);
}

//! Any of the three forms, chosen by "kind".
inline any_latency latency_from_json(const json::value& doc, const latency_context& ctx = {})
{
    const std::string& kind = doc.at("kind").as_string("\"kind\"");
    if (kind == "polynomial") return polynomial_from_json(doc);
    if (kind == "table") return table_from_json(doc);
    if (kind == "analytic") return analytic_from_json(doc, ctx);
    throw parse_error("latency model kind \"" + kind + "\" is unknown; use \"polynomial\", \"table\" or \"analytic\"");
}

//! Reads a model file; errors name the file.
inline any_latency load_latency(const std::string& path, const latency_context& ctx = {})
{
    const std::string text = read_file(path, "latency model file");
    try {
        return latency_from_json(json::parse(text), ctx);
    } catch (const parse_error& e) {
        throw parse_error("latency model file \"" + path + "\": " + e.what());
    } catch (const invalid_argument& e) {
        throw invalid_argument("latency model file \"" + path + "\": " + e.what());
    }
}

inline json::value to_json(const polynomial_latency& p)
{
    json::object k;
    for (int i = 0; i < polynomial_latency::term_count; ++i)
        if (p.coefficients()[i] != 0) k[std::string(polynomial_latency::term_names[i])] = p.coefficients()[i];
    return json::object{{"kind", "polynomial"}, {"coefficients", std::move(k)}};
}

inline json::value to_json(const table_latency& t)
{
    json::array samples;
    for (const auto& s : t.samples())
        samples.push_back(json::object{{"b", s.b}, {"s", s.s}, {"c", s.c}, {"seconds", s.seconds}});
    return json::object{{"kind", "table"}, {"samples", std::move(samples)}};
}

inline json::value to_json(const analytic_latency& a)
{
    const auto& m = a.model();
    const auto& d = a.device();
    const auto& l = a.link();
    return json::object{
        {"kind", "analytic"},
        {"model", json::object{{"name", std::string(m.name)}, {"layers", m.layers}, {"hidden", m.hidden},
                               {"heads", m.heads}, {"vocab", m.vocab}}},
        {"device", json::object{{"name", std::string(d.name)}, {"peak_flops", d.peak_flops},
                                {"memory_bandwidth", d.memory_bandwidth},
                                {"intra_node_bandwidth", d.intra_node_bandwidth},
                                {"kernel_overhead", d.kernel_overhead}, {"matmul_efficiency", d.matmul_efficiency},
                                {"memory_efficiency", d.memory_efficiency}, {"sm_count", d.sm_count},
                                {"gemm_tile", d.gemm_tile}, {"all_reduce_latency", d.all_reduce_latency},
                                {"host_op_overhead", d.host_op_overhead}}},
        {"link", json::object{{"name", std::string(l.name)}, {"bandwidth", l.bandwidth}, {"latency", l.latency},
                              {"efficiency", l.efficiency}}},
        {"layers_per_stage", a.layers_per_stage()},
        {"precision_bytes", a.settings().precision_bytes},
        {"tensor_parallel", a.settings().tensor_parallel},
        {"with_head", a.settings().with_head},
        {"form", std::string(to_string(a.settings().form))},
        {"gradient_bytes", a.settings().gradient_bytes}};
}

} // namespace tpipe
