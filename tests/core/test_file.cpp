// Input files: what is not a regular file is refused before open() (a FIFO would block there
// forever, /dev/zero would be read until memory runs out), and a read stops at its limit.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "tpipe/core/file.hpp"
#include "tpipe/core/quote.hpp"

namespace fs = std::filesystem;

TEST_CASE("read_file refuses what is not a regular file, naming what it is", "[core][file]")
{
    const fs::path dir = fs::temp_directory_path() / ("tpipe_file_test_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const std::string fifo = (dir / "pipe").string();
    REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
    CHECK_THROWS_WITH(tpipe::read_file(fifo, "program file"),
                      Catch::Contains("is a FIFO (named pipe); inputs are read whole, so give a regular file"));
    CHECK_THROWS_WITH(tpipe::read_file("/dev/zero", "data file"), Catch::Contains("\"/dev/zero\" is a character device"));
    CHECK_THROWS_WITH(tpipe::read_file(dir.string(), "model file"), Catch::Contains("is a directory, not a file"));
    CHECK_THROWS_WITH(tpipe::read_file((dir / "none").string(), "model file"), Catch::Contains("does not exist"));
    CHECK_THROWS_WITH(tpipe::read_file("", "model file"), Catch::Contains("the path is empty"));

    const std::string big = (dir / "big").string();
    {
        std::ofstream out(big, std::ios::binary);
        out << std::string(5000, 'x');
    }
    CHECK(tpipe::read_file(big, "data file").size() == 5000);
    CHECK_THROWS_WITH(tpipe::read_file(big, "data file", 4096), Catch::Contains("has 5000 bytes; inputs are read whole, up to 4096 bytes"));
    // A file that reports no size (as /proc files do) is still bounded by the read.
    if (fs::exists("/proc/self/maps"))
        CHECK_THROWS_WITH(tpipe::read_file("/proc/self/maps", "data file", 16), Catch::Contains("holds more than 16 bytes"));
    fs::remove_all(dir);
}

TEST_CASE("quote shows user text escaped and truncated", "[core][quote]")
{
    CHECK(tpipe::quote("1f1b") == "\"1f1b\"");
    CHECK(tpipe::quote(std::string("a\0b", 3)) == "\"a\\0b\"");
    CHECK(tpipe::quote("1f1b\033[2J\r") == "\"1f1b\\x1b[2J\\r\"");
    CHECK(tpipe::quote("\xEF\xBB\xBFstage,actions") == "\"<UTF-8 BOM>stage,actions\"");
    CHECK(tpipe::quote(std::string(10'000'000, 'x'), 8) == "\"xxxxxxxx\" (9999992 more bytes not shown)");
    CHECK(tpipe::quote("say \"hi\"\\") == "\"say \\\"hi\\\"\\\\\"");
}
