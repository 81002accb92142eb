#pragma once
// Schedules by name, for tools and configuration files: a type-erased schedule value and an
// open registry. Every built-in schedule is registered under its tool name and PyTorch's class
// names; a user's schedule registered once (`register_schedule`, from any translation unit
// linked into the program) is reachable by name from `make_schedule`, and therefore from
// `tpipe-plan` and `train_gpt`.
#include <algorithm>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tpipe/schedule/dualpipe_v.hpp"
#include "tpipe/schedule/gpipe.hpp"
#include "tpipe/schedule/interleaved.hpp"
#include "tpipe/schedule/interleaved_zb.hpp"
#include "tpipe/schedule/looped_bfs.hpp"
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

//! What a schedule built by name may be given; each schedule uses what applies to it.
struct schedule_options {
    int virtual_stages = 2;  //!< model chunks per rank, for schedules that take V
};

//! A schedule as the registry knows it.
struct schedule_entry {
    std::string name;                 //!< the name tools use (`--schedule NAME`)
    std::vector<std::string> aliases; //!< other names, e.g. PyTorch's class names
    std::function<any_schedule(const schedule_options&)> make;
    int stages_per_rank = 1;          //!< stages it places on each rank (with V: used when it takes V)
    bool takes_virtual_stages = false;  //!< stages per rank are the options' V
    bool runnable = true;  //!< tpipe's runtime runs its programs (false: they use PyTorch-only kinds)
};

namespace detail {
inline bool same_name(std::string_view a, std::string_view b)
{
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [&](char x, char y) { return lower(x) == lower(y); });
}
} // namespace detail

//! The schedules known by name. Names and aliases match case-insensitively (as PyTorch's
//! get_schedule_class does). Register before starting threads that look schedules up.
class schedule_registry {
public:
    static schedule_registry& global()
    {
        static schedule_registry r = built_ins();
        return r;
    }

    //! Adds a schedule; refuses an empty name, a missing factory, or a name or alias already taken.
    void add(schedule_entry e)
    {
        if (e.name.empty() || !e.make) throw invalid_argument("register_schedule: a schedule needs a name and a factory");
        std::vector<std::string> all = e.aliases;
        all.push_back(e.name);
        for (const auto& n : all)
            if (const schedule_entry* taken = find(n))
                throw invalid_argument("register_schedule: the name '" + n + "' is taken by schedule '" + taken->name +
                                       "'; choose another");
        entries_.push_back(std::move(e));
    }

    //! The entry called `name` (or aliased so), or nullptr.
    const schedule_entry* find(std::string_view name) const
    {
        for (const auto& e : entries_) {
            if (detail::same_name(e.name, name)) return &e;
            for (const auto& a : e.aliases)
                if (detail::same_name(a, name)) return &e;
        }
        return nullptr;
    }

    //! The entry called `name`; refuses an unknown name with the list of known ones.
    const schedule_entry& at(std::string_view name) const
    {
        if (const schedule_entry* e = find(name)) return *e;
        std::string known;
        for (const auto& e : entries_) known += (known.empty() ? "" : ", ") + e.name;
        throw invalid_argument("unknown schedule " + quote(name) + "; known schedules: " + known +
                               " (and PyTorch's class names, e.g. Schedule1F1B)");
    }

    //! Registered names in registration order; with `all` also those tpipe's runtime cannot run.
    std::vector<std::string> names(bool all = false) const
    {
        std::vector<std::string> out;
        for (const auto& e : entries_)
            if (all || e.runnable) out.push_back(e.name);
        return out;
    }

private:
    static schedule_registry built_ins()
    {
        schedule_registry r;
        auto plain = [](auto s) { return [s](const schedule_options&) { return any_schedule(s); }; };
        r.add({"gpipe", {"ScheduleGPipe", "GPipe"}, plain(gpipe{})});
        r.add({"1f1b", {"Schedule1F1B"}, plain(one_f_one_b{})});
        r.add({"interleaved", {"ScheduleInterleaved1F1B", "Interleaved1F1B"},
               [](const schedule_options& o) { return any_schedule(interleaved_1f1b{o.virtual_stages}); }, 2, true});
        r.add({"zb-h1", {}, plain(zb_h1{})});
        r.add({"zb-v", {"ScheduleZBVZeroBubble", "ZBVZeroBubble"}, plain(zb_v{}), 2});
        r.add({"terapipe-gpipe", {}, [](const schedule_options&) { return any_schedule(gpipe{}, "terapipe-gpipe"); }});
        r.add({"terapipe-1f1b", {}, plain(terapipe_1f1b{})});
        r.add({"looped-bfs", {"ScheduleLoopedBFS", "LoopedBFS"},
               [](const schedule_options& o) { return any_schedule(looped_bfs{o.virtual_stages}); }, 2, true});
        r.add({"interleaved-zb", {"ScheduleInterleavedZeroBubble", "InterleavedZeroBubble"},
               [](const schedule_options& o) { return any_schedule(interleaved_zb{o.virtual_stages}); }, 2, true});
        r.add({"dualpipe-v", {"ScheduleDualPipeV", "DualPipeV"}, plain(dualpipe_v{}), 2});
        return r;
    }

    std::vector<schedule_entry> entries_;
};

//! Registers a schedule under a name (and aliases); usable at namespace scope:
//! `inline const bool registered = tpipe::register_schedule({"mine", {}, [](auto&) { return tpipe::any_schedule(mine{}); }});`
inline bool register_schedule(schedule_entry e)
{
    schedule_registry::global().add(std::move(e));
    return true;
}

//! Names of the schedules tpipe's runtime runs (the ones to train with); `all` adds the ones
//! whose programs are for reading, writing and simulating only (none among tpipe's own today;
//! a user may register one).
inline std::vector<std::string> schedule_names(bool all = false) { return schedule_registry::global().names(all); }

//! The tool name of the schedule called (or aliased) `name`.
inline std::string canonical_schedule_name(std::string_view name) { return schedule_registry::global().at(name).name; }

//! The schedule called `name` (or one of its aliases); `virtual_stages` is used by the
//! schedules that take V (interleaved, looped-bfs, interleaved-zb).
inline any_schedule make_schedule(std::string_view name, int virtual_stages = 2)
{
    return schedule_registry::global().at(name).make(schedule_options{virtual_stages});
}

//! Stages per rank the named schedule lays out (V for those that take it, zb-v and dualpipe-v 2, others 1).
inline int stages_per_rank(std::string_view name, int virtual_stages = 2)
{
    const schedule_entry& e = schedule_registry::global().at(name);
    return e.takes_virtual_stages ? virtual_stages : e.stages_per_rank;
}

} // namespace tpipe
