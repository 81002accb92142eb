#pragma once
// Options shared by the commands that build and simulate a schedule (simulate, compare, run).
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "cli/flag_reader.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/quote.hpp"
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

//! Size limits, so that a short command line cannot ask for hours or gigabytes of work.
inline constexpr int max_ranks = 1 << 16;
inline constexpr int max_microbatches = 1 << 20;
inline constexpr long long max_computes = 1'000'000;
//! Largest time per action: a makespan over max_computes such actions stays finite.
inline constexpr double max_cost = 1e100;

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

//! Refuses a program of more than max_computes stage computations, before it is built: every
//! stage computes every unit, so the program has about stages x units x 3 actions.
inline void check_size(const pipeline_options& o, int per_rank, int slices)
{
    const double computes = double(o.ranks) * per_rank * double(o.microbatches) * double(slices);
    if (computes > max_computes)
        throw invalid_argument("--stages " + std::to_string(o.ranks) + " x --microbatches " +
                               std::to_string(o.microbatches) + " x --slices " + std::to_string(slices) +
                               " (x stages per rank) is " + std::to_string(static_cast<long long>(computes)) +
                               " stage computations; tpipe-plan builds at most " + std::to_string(max_computes) +
                               " (about 400 MB and a second or two to simulate)");
}

//! Reads --schedule --stages --microbatches --virtual --slices, refusing values a schedule cannot use.
inline pipeline_options read_pipeline(flag_reader& a, bool need_schedule = true)
{
    pipeline_options o;
    if (need_schedule) {
        auto s = a.value("--schedule");
        if (!s) throw invalid_argument("missing --schedule NAME (one of " + schedule_list() + ")");
        o.schedule = canonical_schedule_name(*s);  // refuses an unknown name with the list of known ones
    }
    o.ranks = a.number<int>("--stages", o.ranks, 1, max_ranks);
    o.microbatches = a.number<int>("--microbatches", o.microbatches, 1, max_microbatches);
    const auto virt = a.value("--virtual");
    const auto slices = a.value("--slices");
    if (virt) {
        if (need_schedule && !schedule_registry::global().at(o.schedule).takes_virtual_stages)
            throw invalid_argument("--virtual applies to the schedules that take V (" + virtual_schedule_list() +
                                   "); " + o.schedule + " places " + std::to_string(stages_per_rank(o.schedule)) +
                                   " stage(s) per rank");
        o.virtual_stages = flag_reader::parse<int>("--virtual", *virt, 1, max_ranks);
    }
    if (slices) {
        o.slices = flag_reader::parse<int>("--slices", *slices, 1, max_microbatches);
    } else if (need_schedule && o.schedule.rfind("terapipe-", 0) == 0) {
        throw invalid_argument(o.schedule + " pipelines token slices: give --slices S (slices per microbatch)");
    }
    check_size(o, need_schedule ? stages_per_rank(o.schedule, o.virtual_stages) : 1, o.slices);
    return o;
}

//! Reads --f --b --w --comm: per stage, per whole microbatch; a token slice costs its share.
inline uniform_costs read_costs(flag_reader& a, const pipeline_options& o)
{
    uniform_costs c;
    c.f = a.number<double>("--f", 1.0, 0, max_cost);
    c.b = a.number<double>("--b", 1.0, 0, max_cost);
    c.w = a.number<double>("--w", 1.0, 0, max_cost);
    c.comm = a.number<double>("--comm", 0.0, 0, max_cost);
    c.tokens_per_microbatch = o.slices;
    if (c.f + c.b + c.w <= 0) throw invalid_argument("--f, --b and --w cannot all be 0");
    return c;
}

inline program build_program(const pipeline_options& o)
{
    return make_schedule(o.schedule, o.virtual_stages)
        .program(topology{o.ranks}, tpipe::microbatches(o.microbatches, o.slices));
}

inline void write_file(const std::string& path, const std::string& text) { tpipe::write_file(path, text); }

//! The output files of one command, before any work: each named (not ""), and no two the same
//! file (the second would overwrite the first).
inline void distinct_outputs(const std::vector<std::pair<std::string, std::optional<std::string>>>& outputs)
{
    namespace fs = std::filesystem;
    for (std::size_t i = 0; i < outputs.size(); ++i) {
        const auto& [flag, path] = outputs[i];
        if (!path) continue;
        if (path->empty()) throw invalid_argument(flag + " needs a file name, got an empty one");
        for (std::size_t j = 0; j < i; ++j) {
            const auto& [other, other_path] = outputs[j];
            if (!other_path) continue;
            std::error_code e1, e2;
            const bool same = fs::weakly_canonical(*path, e1) == fs::weakly_canonical(*other_path, e2) ||
                              *path == *other_path;
            if (same)
                throw invalid_argument(other + " and " + flag + " name the same file " + tpipe::quote(*path) +
                                       "; the second would overwrite the first: give each its own file");
        }
    }
}

} // namespace tpipe::cli
