// tpipe-plan: plan, simulate, validate and run pipeline programs from the command line.
#include <exception>
#include <iomanip>
#include <iostream>

#include "command.hpp"
#include "cli/flag_reader.hpp"
#include "tpipe/core/file.hpp"
#include "tpipe/core/quote.hpp"

int main(int argc, char** argv)
{
    using namespace tpipe::cli;
    auto usage = [](std::ostream& os) {
        os << "usage: tpipe-plan <command> [options]\n\ncommands:\n";
        for (const auto& [name, cmd] : commands()) os << "  " << std::left << std::setw(10) << name << cmd.summary << "\n";
        os << "\n`tpipe-plan <command> --help` describes a command's options.\n";
    };
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
        usage(argc < 2 ? std::cerr : std::cout);
        return argc < 2 ? 2 : 0;
    }
    auto it = commands().find(argv[1]);
    if (it == commands().end()) {
        std::cerr << "tpipe-plan: unknown command " << tpipe::quote(argv[1]) << "\n\n";
        usage(std::cerr);
        return 2;
    }
    try {
        tpipe::flag_reader a(argc, argv, 2);  // the command's flags, after its name
        const int status = it->second.run(a);
        tpipe::close_standard_output();  // what was printed must have arrived (a full disk, /dev/full)
        return status;
    } catch (const std::exception& e) {
        std::cerr << "tpipe-plan " << argv[1] << ": " << tpipe::printable(e.what()) << "\n";
        return 2;
    }
}
