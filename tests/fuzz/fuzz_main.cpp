// libFuzzer entry of one target, chosen at compile time: clang++ -fsanitize=fuzzer
// -DTPIPE_FUZZ_TARGET=<index into tpipe::fuzz::targets> (tools/fuzz.sh builds each).
#include "targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    tpipe::fuzz::targets[TPIPE_FUZZ_TARGET].run(std::string_view(reinterpret_cast<const char*>(data), size));
    return 0;
}
