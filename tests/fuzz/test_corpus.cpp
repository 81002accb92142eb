// Replays the fuzz corpus (tests/fuzz/corpus/<target>/*) through the fuzz targets in the
// regular build: every input the fuzzer kept, and every crash it found, stays a regression test.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "targets.hpp"

TEST_CASE("every fuzz corpus input is refused with tpipe::error or accepted with its property", "[fuzz]")
{
    namespace fs = std::filesystem;
    const fs::path root = TPIPE_FUZZ_CORPUS;
    for (const auto& t : tpipe::fuzz::targets) {
        const fs::path dir = root / t.name;
        REQUIRE(fs::is_directory(dir));
        int inputs = 0;
        for (const auto& entry : fs::directory_iterator(dir)) {
            std::ifstream in(entry.path(), std::ios::binary);
            std::ostringstream text;
            text << in.rdbuf();
            INFO(t.name << " " << entry.path().filename().string());
            CHECK_NOTHROW(t.run(text.str()));
            ++inputs;
        }
        CHECK(inputs > 0);
    }
}
