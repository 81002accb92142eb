#pragma once
// Options shared by the commands that build and simulate a schedule (simulate, compare, run).
#include <fstream>
#include <string>

#include "args.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/sim/costs.hpp"
#include "tpipe/slice/slicers.hpp"

namespace tpipe::cli {

struct pipeline_options {
    std::string schedule = "1f1b";
    int ranks = 4;
    int microbatches = 8;
    int virtual_stages = 2;
    int slices = 1;
};

//! Every registered schedule name, comma-separated (for help and errors).
inline std::string schedule_list()
{
    std::string out;
    for (const auto& n : schedule_names(true)) out += (out.empty() ? "" : ", ") + n;
    return out;
}

//! The registered schedules that take --virtual V.
inline std::string virtual_schedule_list()
{
    std::string out;
    for (const auto& n : schedule_names(true))
        if (schedule_registry::global().at(n).takes_virtual_stages) out += (out.empty() ? "" : ", ") + n;
    return out;
}

//! Reads --schedule --stages --microbatches --virtual --slices, refusing values a schedule cannot use.
inline pipeline_options read_pipeline(args& a, bool need_schedule = true)
{
    pipeline_options o;
    if (need_schedule) {
        auto s = a.value("--schedule");
        if (!s) throw invalid_argument("missing --schedule NAME (one of " + schedule_list() + ")");
        o.schedule = canonical_schedule_name(*s);  // refuses an unknown name with the list of known ones
    }
    o.ranks = a.number<int>("--stages", o.ranks);
    o.microbatches = a.number<int>("--microbatches", o.microbatches);
    const auto virt = a.value("--virtual");
    const auto slices = a.value("--slices");
    if (o.ranks < 1) throw invalid_argument("--stages must be >= 1 (pipeline ranks), got " + std::to_string(o.ranks));
    if (o.microbatches < 1)
        throw invalid_argument("--microbatches must be >= 1, got " + std::to_string(o.microbatches));
    if (virt) {
        if (need_schedule && !schedule_registry::global().at(o.schedule).takes_virtual_stages)
            throw invalid_argument("--virtual applies to the schedules that take V (" + virtual_schedule_list() +
                                   "); " + o.schedule + " places " + std::to_string(stages_per_rank(o.schedule)) +
                                   " stage(s) per rank");
        o.virtual_stages = args::parse<int>("--virtual", *virt);
        if (o.virtual_stages < 1)
            throw invalid_argument("--virtual must be >= 1, got " + std::to_string(o.virtual_stages));
    }
    if (slices) {
        o.slices = args::parse<int>("--slices", *slices);
        if (o.slices < 1) throw invalid_argument("--slices must be >= 1, got " + std::to_string(o.slices));
    } else if (need_schedule && o.schedule.rfind("terapipe-", 0) == 0) {
        throw invalid_argument(o.schedule + " pipelines token slices: give --slices S (slices per microbatch)");
    }
    return o;
}

//! Reads --f --b --w --comm: per stage, per whole microbatch; a token slice costs its share.
inline uniform_costs read_costs(args& a, const pipeline_options& o)
{
    uniform_costs c;
    c.f = a.number<double>("--f", 1.0);
    c.b = a.number<double>("--b", 1.0);
    c.w = a.number<double>("--w", 1.0);
    c.comm = a.number<double>("--comm", 0.0);
    c.tokens_per_microbatch = o.slices;
    for (auto [name, v] : {std::pair{"--f", c.f}, {"--b", c.b}, {"--w", c.w}, {"--comm", c.comm}})
        if (!(v >= 0)) throw invalid_argument(std::string(name) + " must be a time >= 0, got " + std::to_string(v));
    if (c.f + c.b + c.w <= 0) throw invalid_argument("--f, --b and --w cannot all be 0");
    return c;
}

inline program build_program(const pipeline_options& o)
{
    return make_schedule(o.schedule, o.virtual_stages)
        .program(topology{o.ranks}, tpipe::microbatches(o.microbatches, o.slices));
}

inline void write_file(const std::string& path, const std::string& text)
{
    std::ofstream out(path);
    if (!out) throw error("cannot write '" + path + "'");
    out << text;
    if (!out) throw error("failed while writing '" + path + "'");
}

} // namespace tpipe::cli
