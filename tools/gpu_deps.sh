#!/usr/bin/env bash
# Gathers, on this (Debian 12) machine, what tests/gpu/run.sh needs on a GPU machine that has the
# CUDA toolkit and CMake but not tpipe's other build dependencies, into .gpu-deps/ (git-ignored):
# Catch2 v2 (header + CMake package), Google Benchmark (library, headers, CMake package) and
# OpenBLAS with its pthread threading (the CPU reference GPT that the CUDA GPT is compared with).
# About 45 MB. Carry the folder to the GPU machine next to the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh libopenblas-pthread-dev
arch=$(gcc -print-multiarch)
out=.gpu-deps
rm -rf "$out"
# The same layout as under /usr, so that the packages' CMake files find their files relative to
# themselves (CMAKE_PREFIX_PATH=.gpu-deps).
mkdir -p "$out/include" "$out/lib/cmake" "$out/lib/$arch/cmake" "$out/openblas"
cp -r /usr/include/catch2 /usr/include/benchmark "$out/include/"
cp -r /usr/lib/cmake/Catch2 "$out/lib/cmake/"
cp /usr/lib/libCatch2WithMain.a "$out/lib/"  # named by the package's targets file
cp -r "/usr/lib/$arch/cmake/benchmark" "$out/lib/$arch/cmake/"
cp -P "/usr/lib/$arch"/libbenchmark.so* "/usr/lib/$arch"/libbenchmark_main.a "$out/lib/$arch/"
cp "/usr/include/$arch/openblas-pthread"/*.h "$out/openblas/"
cp -L "/usr/lib/$arch/openblas-pthread/libopenblas.so.0" "$out/openblas/libopenblas.so"
cp -L "/usr/lib/$arch/libgfortran.so.5" "/usr/lib/$arch/libquadmath.so.0" "$out/openblas/"
du -sh "$out"
