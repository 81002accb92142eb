#pragma once
// A timeline is what ran (or would run) where and when: the common currency of the simulator
// and the runtime, drawn by the exporters (Perfetto trace, SVG, text grid).
#include "tpipe/schedule/action.hpp"

namespace tpipe {

struct timed_action {
    int rank = 0;
    action what{};
    double start = 0;  //!< seconds
    double end = 0;    //!< seconds; for a send, when the data arrives
};

} // namespace tpipe
