#pragma once
// Schedules by name, for tools and configuration files: a type-erased schedule value.
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/schedule/gpipe.hpp"
#include "tpipe/schedule/interleaved.hpp"
#include "tpipe/schedule/one_f_one_b.hpp"
#include "tpipe/schedule/terapipe_1f1b.hpp"
#include "tpipe/schedule/zb_h1.hpp"
#include "tpipe/schedule/zb_v.hpp"

namespace tpipe {

//! Any schedule, held by value behind one interface; itself models tpipe::schedule.
class any_schedule {
public:
    template <schedule S>
    any_schedule(S s, std::string name = {})
        : name_(name.empty() ? std::string(s.name()) : std::move(name)),
          make_([s](const topology& t, const scheme& u) { return s.program(t, u); })
    {
    }
    std::string_view name() const { return name_; }
    tpipe::program program(const topology& t, const scheme& units) const { return make_(t, units); }

private:
    std::string name_;
    std::function<tpipe::program(const topology&, const scheme&)> make_;
};

inline std::vector<std::string> schedule_names()
{
    return {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v", "terapipe-gpipe", "terapipe-1f1b"};
}

//! The schedule called `name`; `virtual_stages` is used by "interleaved" only.
inline any_schedule make_schedule(std::string_view name, int virtual_stages = 2)
{
    if (name == "gpipe") return gpipe{};
    if (name == "1f1b") return one_f_one_b{};
    if (name == "interleaved") return interleaved_1f1b{virtual_stages};
    if (name == "zb-h1") return zb_h1{};
    if (name == "zb-v") return zb_v{};
    if (name == "terapipe-gpipe") return any_schedule(gpipe{}, "terapipe-gpipe");
    if (name == "terapipe-1f1b") return terapipe_1f1b{};
    std::string known;
    for (const auto& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
    throw invalid_argument("unknown schedule '" + std::string(name) + "'; known schedules: " + known);
}

//! Stages per rank the named schedule lays out (interleaved: V, zb-v: 2, others: 1).
inline int stages_per_rank(std::string_view name, int virtual_stages = 2)
{
    return name == "interleaved" ? virtual_stages : name == "zb-v" ? 2 : 1;
}

} // namespace tpipe
