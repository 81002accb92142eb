#!/usr/bin/env bash
# Builds tpipe with warnings as errors and runs the whole test suite through CTest.
# Usage: tools/test.sh            (build dir: build/, override with BUILD_DIR=...)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh python3-torch libopenmpi-dev openmpi-bin libopenblas-pthread-dev libtorch-dev  # Open MPI: the MPI tree is built and tested too; OpenBLAS: the reference GPT; libtorch: the adapter's example
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPIPE_WERROR=ON -DTPIPE_BUILD_TESTS=ON \
      -DTPIPE_BUILD_EXAMPLES=ON -DTPIPE_BUILD_BENCHMARKS=ON -DTPIPE_ENABLE_MPI=ON -DTPIPE_BUILD_LIBTORCH_EXAMPLES=ON >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
