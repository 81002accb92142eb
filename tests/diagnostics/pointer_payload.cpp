// Must not compile: a vector of pointers has no byte form (its bytes are addresses of this process).
#include <vector>

#include "tpipe/transport/payload_traits.hpp"

static_assert(tpipe::byte_payload<std::vector<double>>);
bool sent = tpipe::byte_payload<std::vector<double*>>;

int main() { return sent ? 0 : 1; }
