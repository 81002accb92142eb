#!/usr/bin/env bash
# tpipe's main demonstration, with built-in defaults: plans and simulates every schedule for a
# GPT-3-like pipeline and prints their timelines side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPIPE_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target tpipe-plan >/dev/null
plan="$build/tools/tpipe-plan"

echo "### 1. Schedules: 4 pipeline ranks, 8 microbatches; per stage F = I = W = 1 (a transformer block's"
echo "###    forward, input-gradient and weight-gradient backward take about the same time)"
echo
"$plan" compare --stages 4 --microbatches 8 --svg-dir "$build/demo"
echo
echo "(SVG pictures of these timelines: $build/demo/*.svg)"
