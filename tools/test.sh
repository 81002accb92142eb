#!/usr/bin/env bash
# Builds tpipe with warnings as errors and runs the whole test suite through CTest.
# Usage: tools/test.sh            (build dir: build/, override with BUILD_DIR=...)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh python3-torch libopenmpi-dev openmpi-bin libucx-dev libopenblas-pthread-dev libtorch-dev  # Open MPI: the MPI tree is built and tested too; UCX: the UCX link; OpenBLAS: the reference GPT; libtorch: the adapter's example
build=${BUILD_DIR:-build}
# The CUDA and NCCL trees are compiled and linked wherever the CUDA toolkit is (their GPU tests
# report themselves skipped without a GPU); TPIPE_REQUIRE_CUDA=1 (CI) makes a missing toolkit an error.
cuda=()
command -v nvcc >/dev/null || [ ! -x /usr/local/cuda/bin/nvcc ] || export PATH=/usr/local/cuda/bin:$PATH
if command -v nvcc >/dev/null; then
  cuda=(-DTPIPE_ENABLE_CUDA=ON -DTPIPE_ENABLE_NCCL=ON)
elif [ "${TPIPE_REQUIRE_CUDA:-0}" = 1 ]; then
  echo "tools/test.sh: TPIPE_REQUIRE_CUDA=1 but no CUDA toolkit (nvcc) is on PATH or in /usr/local/cuda" >&2
  exit 1
else
  echo "tools/test.sh: no CUDA toolkit (nvcc): the CUDA and NCCL trees are not built" >&2
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPIPE_WERROR=ON -DTPIPE_BUILD_TESTS=ON \
      -DTPIPE_BUILD_EXAMPLES=ON -DTPIPE_BUILD_BENCHMARKS=ON -DTPIPE_ENABLE_MPI=ON -DTPIPE_ENABLE_UCX=ON -DTPIPE_BUILD_LIBTORCH_EXAMPLES=ON \
      "${cuda[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
