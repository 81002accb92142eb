// Must not compile: payload traits with a recycle() but without declaring the capability.
// Recycling is an explicit opt-in (tpipe/transport/recyclable_payload.hpp); the message must name the
// payload and the declaration expected (tests/CMakeLists.txt checks it).
#include <array>
#include <cstddef>
#include <span>
#include <utility>

#include "tpipe/transport/recyclable_payload.hpp"

struct undeclared_bytes {
    std::array<std::byte, 8> b{};
};
template <>
struct tpipe::payload_traits<undeclared_bytes> {
    struct header {};
    static header header_of(const undeclared_bytes&) { return {}; }
    static undeclared_bytes make(const header&) { return {}; }
    static std::span<const std::byte> bytes(const undeclared_bytes& v) { return v.b; }
    static std::span<std::byte> bytes(undeclared_bytes& v) { return v.b; }
    static void recycle(undeclared_bytes&&) {}
};

int main()
{
    undeclared_bytes x;
    tpipe::recycle(std::move(x));
}
