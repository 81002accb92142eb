#pragma once
// Sub-commands of tpipe-plan register themselves here; main() dispatches by name.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/flag_reader.hpp"

namespace tpipe::cli {

struct command {
    std::string summary;                               //!< one line for `tpipe-plan --help`
    std::function<int(flag_reader&)> run;                     //!< returns the exit code
};

inline std::map<std::string, command>& commands()
{
    static std::map<std::string, command> table;
    return table;
}

struct registrar {
    registrar(std::string name, std::string summary, std::function<int(flag_reader&)> run)
    {
        commands().emplace(std::move(name), command{std::move(summary), std::move(run)});
    }
};

} // namespace tpipe::cli
