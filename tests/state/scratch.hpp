#pragma once
// A fresh directory under the system's temporary directory for one test case, removed at its
// end (the state tests' checkpoints go there).
#include <filesystem>
#include <string>

#include <unistd.h>

namespace state_test {

struct scratch {
    std::filesystem::path root;
    explicit scratch(const std::string& tag)
        : root(std::filesystem::temp_directory_path() / ("tpipe_state_" + tag + "_" + std::to_string(::getpid())))
    {
        std::filesystem::remove_all(root);
        std::filesystem::create_directories(root);
    }
    ~scratch() { std::filesystem::remove_all(root); }
    //! The run's checkpoint directory inside it.
    std::string run() const { return (root / "run").string(); }
};

} // namespace state_test
