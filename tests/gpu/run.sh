#!/usr/bin/env bash
# The GPU check, in one script: on a machine with a CUDA GPU, configures tpipe with the CUDA and
# NCCL trees, builds the GPU test suites, the GPU benchmarks and train_gpt, runs the suites
# (CTest label `gpu`) and the benchmarks, and prints a short table last (also written to
# $OUT/summary.md, with the JUnit and benchmark JSON files beside it). Meant to finish within
# 8 minutes on a 16-core machine with one GPU.
#
#   bash tools/gpu_deps.sh        # once, on a Debian machine: Catch2, Google Benchmark, OpenBLAS
#                                 # into .gpu-deps/ (for GPU machines that lack them)
#   bash tests/gpu/run.sh         # on the GPU machine, with .gpu-deps/ next to the checkout
#
# Environment: BUILD_DIR (default build-gpu), OUT (default $BUILD_DIR/out), TPIPE_GPU_DEPS
# (default .gpu-deps), CMAKE_CUDA_ARCHITECTURES (default 90: H100/H200).
set -uo pipefail
cd "$(dirname "$0")/../.."
start=$(date +%s)
build=${BUILD_DIR:-build-gpu}
out=${OUT:-$build/out}
deps=$(realpath -m "${TPIPE_GPU_DEPS:-.gpu-deps}")
mkdir -p "$out"
step() { echo "== [$(( $(date +%s) - start )) s] $*"; }

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
command -v nvcc >/dev/null || { echo "tests/gpu/run.sh: nvcc not found (CUDA toolkit needed)" >&2; exit 2; }
nvidia-smi -L 2>/dev/null || echo "(nvidia-smi not available)"

args=(-DCMAKE_BUILD_TYPE=Release -DTPIPE_BUILD_TESTS=ON -DTPIPE_BUILD_EXAMPLES=ON -DTPIPE_BUILD_BENCHMARKS=ON
      -DTPIPE_ENABLE_CUDA=ON -DTPIPE_ENABLE_NCCL=ON -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}")
command -v ninja >/dev/null && args+=(-G Ninja)
if [ -d "$deps" ]; then
  args+=(-DCMAKE_PREFIX_PATH="$deps" -DTPIPE_GPT_CBLAS_INCLUDE_DIR="$deps/openblas"
         -DTPIPE_GPT_OPENBLAS_LIBRARY="$deps/openblas/libopenblas.so")
  export LD_LIBRARY_PATH="$deps/openblas:$deps/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# NCCL: next to the toolkit, else the one PyTorch's wheels bring (nvidia-nccl-cu13).
if [ ! -f "$(dirname "$(command -v nvcc)")/../include/nccl.h" ]; then
  # nvidia.nccl is a namespace package (no __init__.py, __file__ is None): take its __path__.
  nccl=$(python3 -c 'import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
  if [ -n "$nccl" ] && [ -f "$nccl/include/nccl.h" ] && ls "$nccl"/lib/libnccl.so* >/dev/null 2>&1; then
    args+=(-DTPIPE_NCCL_INCLUDE_DIR="$nccl/include" -DTPIPE_NCCL_LIBRARY="$(ls "$nccl"/lib/libnccl.so* | head -1)")
    export LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  else
    echo "tests/gpu/run.sh: no NCCL found (neither beside nvcc nor nvidia-nccl-cu13): the NCCL tree is left out" >&2
    args+=(-DTPIPE_ENABLE_NCCL=OFF)
  fi
fi

step "configure $build"
cmake -S . -B "$build" "${args[@]}" >"$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
# Only what the GPU check runs: the GPU suites (CTest label gpu), the GPU benchmarks, train_gpt.
mapfile -t targets < <(cmake --build "$build" --target help | grep -o 'tpipe_gpu_tests_[A-Za-z0-9_]*' | sort -u)
targets+=(train_gpt)
for b in bench_cuda_engine bench_gpt_cuda; do
  [ -f "bench/$b.cpp" ] && targets+=("$b")
done
step "build ${targets[*]}"
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1 || { tail -60 "$out/build.log"; exit 1; }

step "GPU test suites"
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 240 --output-junit "$(realpath -m "$out")/gpu-tests.xml"
tests_rc=$?

for b in bench_cuda_engine bench_gpt_cuda; do
  exe=$(find "$build" -name "$b" -type f -perm -u+x | head -1)
  [ -n "$exe" ] || continue
  step "$b"
  timeout 150 "$exe" --benchmark_out="$out/$b.json" --benchmark_out_format=json --benchmark_min_time=0.2 \
    || echo "$b exited with $?"
done

step "summary"
python3 tests/gpu/summary.py "$out" | tee "$out/summary.md"
echo "GPU check finished in $(( $(date +%s) - start )) s"
exit $tests_rc
