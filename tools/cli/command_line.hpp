#pragma once
// The words of a command line, as tpipe-plan and the example trainers read them: one set of
// rules for every command. `--name=value` is the same as `--name value` (the form many users
// type); everything else is kept as given.
#include <string>
#include <vector>

namespace tpipe {

class command_line {
public:
    //! argv[1..argc), with each `--name=value` split into `--name` and `value`.
    command_line(int argc, char** argv)
    {
        for (int i = 1; i < argc; ++i) {
            const std::string w = argv[i];
            const auto eq = w.find('=');
            if (w.rfind("--", 0) == 0 && eq != std::string::npos && eq > 2) {
                words_.push_back(w.substr(0, eq));
                words_.push_back(w.substr(eq + 1));
            } else {
                words_.push_back(w);
            }
        }
        pointers_.push_back(argc > 0 ? argv[0] : nullptr);
        for (auto& w : words_) pointers_.push_back(w.data());
        pointers_.push_back(nullptr);
    }
    command_line(const command_line&) = delete;
    command_line& operator=(const command_line&) = delete;

    //! The words after the program name.
    const std::vector<std::string>& words() const noexcept { return words_; }
    //! An argv-style view of the same words (argv()[0] is the program name), for loops over argv.
    int argc() const noexcept { return static_cast<int>(words_.size()) + 1; }
    char** argv() noexcept { return pointers_.data(); }

private:
    std::vector<std::string> words_;
    std::vector<char*> pointers_;
};

} // namespace tpipe
