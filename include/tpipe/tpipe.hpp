#pragma once
// tpipe: composable pipeline-parallelism primitives. This umbrella header is CPU-only; the
// CUDA, NCCL and MPI parts are included explicitly from their own folders.
#include "tpipe/core/error.hpp"
#include "tpipe/core/unit.hpp"
#include "tpipe/schedule/by_name.hpp"
#include "tpipe/schedule/csv.hpp"
#include "tpipe/schedule/lower.hpp"
#include "tpipe/schedule/validate.hpp"
#include "tpipe/sim/chrome_trace.hpp"
#include "tpipe/sim/simulate.hpp"
#include "tpipe/sim/svg.hpp"
#include "tpipe/sim/text_timeline.hpp"
#include "tpipe/slice/slicers.hpp"
