// tpipe-plan validate: check a program read from CSV (compute-only or lowered) against the
// dependency rules and for deadlock. Exit 0 when valid, 1 with the reason when not.
#include <fstream>
#include <iostream>
#include <sstream>

#include "command.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/json.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/validate.hpp"

namespace tpipe::cli {
namespace {

int validate_command(flag_reader& a)
{
    if (a.flag("--help")) {
        std::cout << "usage: tpipe-plan validate FILE.csv [--pytorch] [--json]\n\n"
                     "Reads a program in PyTorch's CSV dialect or tpipe's (one row per rank, comma-separated\n"
                     "actions such as 2F0, 1SEND_F1, 1WAIT_SEND_F1, 0REDUCE_GRAD, (0F3;3B1)OVERLAP_F_B, 0I3.2)\n"
                     "and checks it. Exit status 0: valid; 1: invalid or unreadable (the reason is printed).\n"
                     "For its timeline and makespan: tpipe-plan simulate --program FILE.csv.\n"
                     "--pytorch: also for PyTorch's runtime, which pairs the messages between two ranks in\n"
                     "posting order (tpipe's channels match them by unit, so tpipe runs any order that validates).\n";
        return 0;
    }
    const bool as_json = a.flag("--json");
    const bool pytorch = a.flag("--pytorch");
    const auto path = a.positional();
    a.finish();
    if (!path) throw invalid_argument("missing FILE.csv (the program to validate)");
    auto report = [&](bool ok, const std::string& reason, const program* p) {
        if (as_json) {
            json::object o{{"file", *path}, {"valid", ok}, {"reason", reason}};
            if (p) {
                o["ranks"] = p->ranks;
                o["stages"] = p->stages();
                o["microbatches"] = p->units.microbatches();
                o["actions"] = p->size();
                o["lowered"] = p->lowered();
            }
            std::cout << json::dump(o) << "\n";
        } else {
            (ok ? std::cout : std::cerr) << *path << ": " << reason << "\n";
        }
        return ok ? 0 : 1;
    };
    program p;
    try {
        p = from_csv(read_file(*path, "program file"));
    } catch (const error& e) {
        return report(false, e.what(), nullptr);
    }
    const verdict v = check(p);
    if (!v.ok()) return report(false, explain(p, v), &p);
    if (pytorch)
        if (const std::string why = pytorch_order_problem(p); !why.empty())
            return report(false, "not runnable by PyTorch: " + why, &p);
    return report(true,
                  "valid " + std::string(p.lowered() ? "lowered" : "compute-only") + " program: " +
                      std::to_string(p.ranks) + " ranks, " + std::to_string(p.stages()) + " stages, " +
                      std::to_string(p.units.microbatches()) + " microbatches, " + std::to_string(p.size()) + " actions",
                  &p);
}

registrar reg{"validate", "check a program in CSV form for broken dependencies and deadlock", validate_command};

} // namespace
} // namespace tpipe::cli
