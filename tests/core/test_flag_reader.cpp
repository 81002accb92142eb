// tpipe::flag_reader: the one set of rules of tpipe-plan and the example trainers.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cli/flag_reader.hpp"

using tpipe::flag_reader;
using tpipe::usage_error;

namespace {

//! The message of the usage_error `f` throws ("" when it throws none).
template <class F>
std::string refusal(F&& f)
{
    try {
        f();
    } catch (const usage_error& e) {
        return e.what();
    }
    return "";
}

flag_reader from_argv(std::vector<std::string> words)
{
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    return flag_reader(static_cast<int>(words.size()), argv.data());
}

} // namespace

TEST_CASE("flag_reader reads --name value and --name=value alike, after the program name", "[flags]")
{
    auto r = from_argv({"prog", "--steps=3", "--lr", "0.5", "--json", "file.csv"});
    CHECK(r.number("--steps", 1, 1, 100) == 3);
    CHECK(r.positive("--lr", 1e-3) == 0.5);
    CHECK(r.flag("--json"));
    CHECK_FALSE(r.flag("--check"));
    CHECK(r.number("--layers", 4, 1, 100) == 4);  // absent: the fallback
    CHECK(r.positional() == "file.csv");
    CHECK_NOTHROW(r.finish());

    // tpipe-plan reads a command's flags after the command's name.
    std::vector<std::string> words = {"tpipe-plan", "simulate", "--stages", "2"};
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    flag_reader command(4, argv.data(), 2);
    CHECK(command.number("--stages", 1, 1, 8) == 2);
    CHECK_NOTHROW(command.finish());
}

TEST_CASE("flag_reader refuses a repeated flag, counting the = form too", "[flags]")
{
    auto r = from_argv({"prog", "--steps=1", "--steps", "2"});
    CHECK(refusal([&] { r.number("--steps", 1, 1, 100); }) == "--steps is given 2 times; give it once");
    auto s = from_argv({"prog", "--json", "--json"});
    CHECK(refusal([&] { s.flag("--json"); }) == "--json is given 2 times; give it once");
}

TEST_CASE("flag_reader::values reads a repeatable flag in order, = form included", "[flags]")
{
    auto r = from_argv({"prog", "--model", "a.json", "--stages", "2", "--model=b.json", "--json"});
    CHECK(r.values("--model") == std::vector<std::string>{"a.json", "b.json"});
    CHECK(r.number("--stages", 1, 1, 8) == 2);
    CHECK(r.flag("--json"));
    CHECK_NOTHROW(r.finish());
    auto none = from_argv({"prog"});
    CHECK(none.values("--model").empty());
    auto dangling = from_argv({"prog", "--model", "a.json", "--model"});
    CHECK(refusal([&] { dangling.values("--model"); }) == "--model needs a value");
}

TEST_CASE("flag_reader refuses what no read took, listing what the command knows", "[flags]")
{
    auto r = from_argv({"prog", "--stage", "2"});
    r.number("--stages", 1, 1, 8);
    r.flag("--json");
    CHECK(refusal([&] { r.finish(); }) == "unexpected argument \"--stage\"; this command knows: --json --stages");
    // Control bytes in the word are escaped, not sent to the terminal.
    auto t = from_argv({"prog", "--x\033[2J"});
    CHECK(refusal([&] { t.finish(); }) == "unexpected argument \"--x\\x1b[2J\"; this command knows:");
}

TEST_CASE("flag_reader checks every value completely", "[flags]")
{
    auto r = from_argv({"prog", "--layers", "4x", "--lr", "inf", "--tol", "-1", "--data"});
    CHECK(refusal([&] { r.number("--layers", 1, 1, 100); }) == "--layers must be an integer in 1..100, got '4x'");
    CHECK(refusal([&] { r.positive("--lr", 1.0); }) == "--lr needs a positive finite number, got \"inf\"");
    CHECK(refusal([&] { r.positive("--tol", 1.0); }) == "--tol needs a positive finite number, got \"-1\"");
    CHECK(refusal([&] { r.value("--data"); }) == "--data needs a value");
    CHECK(refusal([&] { r.required_number<int>("--stages"); }) == "missing required --stages <number>");
}

TEST_CASE("flag_reader::applies_only refuses a flag given where it does not apply, by name", "[flags]")
{
    auto r = from_argv({"prog", "--check-tol", "0.1", "--keep", "2"});
    CHECK(r.given("--check-tol"));
    CHECK_FALSE(r.given("--check"));
    CHECK_NOTHROW(r.applies_only({"--check-tol"}, true, "applies with --check"));
    CHECK_NOTHROW(r.applies_only({"--save-every"}, false, "applies with --save"));  // not given: nothing to refuse
    CHECK(refusal([&] { r.applies_only({"--save", "--keep"}, false, "applies with --save"); }) ==
          "--keep applies with --save");
    CHECK(refusal([&] { r.applies_only({"--check-tol"}, false, "applies with --check"); }) ==
          "--check-tol applies with --check");
}

TEST_CASE("a usage_error is a tpipe::invalid_argument", "[flags]")
{
    auto r = from_argv({"prog", "--steps", "0"});
    CHECK_THROWS_AS(r.number("--steps", 1, 1, 10), tpipe::invalid_argument);
}
