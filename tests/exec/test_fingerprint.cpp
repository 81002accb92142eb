// The launch agreement's diagnosis: the first differing field and the processes on each side.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tpipe/exec/fingerprint.hpp"

namespace {
std::string launch(int layers, double lr, const std::string& data)
{
    return tpipe::fingerprint().add("binary", "abc").add("--layers", layers).add("--lr", lr).add("--data", data).text();
}
} // namespace

TEST_CASE("disagreement names the first differing field and which processes hold which value", "[exec][fingerprint]")
{
    CHECK(tpipe::disagreement({launch(4, 1e-3, "x"), launch(4, 1e-3, "x")}).empty());
    CHECK(tpipe::disagreement({launch(4, 1e-3, "x")}).empty());
    CHECK(tpipe::disagreement({launch(4, 1e-3, "x"), launch(2, 1e-3, "x"), launch(4, 1e-3, "x")}) ==
          "the processes of this job were launched with different configurations: --layers is \"4\" on processes 0, 2 "
          "and \"2\" on process 1 (every process must run the same binary with the same flags and data)");
    // Only the first differing field is named; numbers are exact (1e-3 and 0.001000001 differ).
    const auto two = tpipe::disagreement({launch(4, 1e-3, "x"), launch(4, 0.001000001, "y")});
    CHECK(two.find("--lr is \"0.001\" on process 0 and \"0.001000001\" on process 1") != std::string::npos);
    CHECK(two.find("--data") == std::string::npos);
    // Values are quoted escaped: a newline in a value cannot forge a field, an escape cannot reach the terminal.
    const auto odd = tpipe::disagreement({tpipe::fingerprint().add("--data", "a\nb=c").text(),
                                          tpipe::fingerprint().add("--data", "a\033[2J").text()});
    CHECK(odd.find("--data is \"a\\\\nb=c\" on process 0 and \"a\\x1b[2J\" on process 1") != std::string::npos);
    // A field only one process has.
    const auto absent = tpipe::disagreement({tpipe::fingerprint().add("a", 1).text(),
                                             tpipe::fingerprint().add("a", 1).add("b", 2).text()});
    CHECK(absent.find("b is (absent) on process 0 and \"2\" on process 1") != std::string::npos);
    // Many values: the list is cut short.
    std::vector<std::string> many;
    for (int p = 0; p < 9; ++p) many.push_back(launch(p, 1e-3, "x"));
    CHECK(tpipe::disagreement(many).find("and 5 other values") != std::string::npos);
}
