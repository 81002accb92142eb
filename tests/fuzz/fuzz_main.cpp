// libFuzzer entry for every target of tpipe::fuzz::targets: one binary (one sanitizer build),
// the target named by the environment variable TPIPE_FUZZ_TARGET (tools/fuzz.sh sets it).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "targets.hpp"

namespace {
const tpipe::fuzz::target* chosen = nullptr;
}

extern "C" int LLVMFuzzerInitialize(int*, char***)
{
    const char* name = std::getenv("TPIPE_FUZZ_TARGET");
    for (const auto& t : tpipe::fuzz::targets)
        if (name && std::strcmp(name, t.name) == 0) chosen = &t;
    if (!chosen) {
        std::fprintf(stderr, "fuzz: TPIPE_FUZZ_TARGET is '%s'; set it to one of:", name ? name : "(unset)");
        for (const auto& t : tpipe::fuzz::targets) std::fprintf(stderr, " %s", t.name);
        std::fprintf(stderr, "\n");
        std::exit(2);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    chosen->run(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
