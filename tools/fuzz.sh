#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/targets.hpp with clang (ASan + UBSan) and runs each
# for a bounded time from the corpus in tests/fuzz/corpus/<target>/. New inputs go to a scratch
# directory, not into the repository; a crash, a sanitizer report or a broken property stops
# with the input saved as $FUZZ_DIR/crash-<target>-*: add it to the corpus (and a Catch2 case)
# once fixed.
#
#   tools/fuzz.sh                 # every target, FUZZ_SECONDS each (default 60)
#   tools/fuzz.sh json csv        # only these
#
# Environment: FUZZ_SECONDS (default 60), FUZZ_DIR (default build-fuzz), CLANGXX (default clang++-14).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
seconds=${FUZZ_SECONDS:-60}
dir=${FUZZ_DIR:-$root/build-fuzz}
cxx=${CLANGXX:-clang++-14}
all=(action csv json latency_json cli manifest)  # the names in tpipe::fuzz::targets
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=("${all[@]}")
command -v "$cxx" >/dev/null || bash tools/setup.sh clang-14 libclang-rt-14-dev
mkdir -p "$dir"
for name in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $name "* ]] || { echo "fuzz.sh: unknown target '$name' (use: ${all[*]})" >&2; exit 2; }
done
# One binary for every target (TPIPE_FUZZ_TARGET picks one at run time): one build, not one per target.
exe=$dir/fuzz_tpipe
echo "== fuzz: build"
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
       -fno-omit-frame-pointer -I"$root/include" -I"$root/tools" "$root/tests/fuzz/fuzz_main.cpp" -o "$exe"
for name in "${targets[@]}"; do
  scratch=$dir/corpus_$name
  log=$dir/fuzz_$name.log
  mkdir -p "$scratch"
  echo "== fuzz $name: ${seconds} s"
  status=0
  TPIPE_FUZZ_TARGET=$name UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 \
    "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=4096 -print_final_stats=1 \
           -artifact_prefix="$dir/crash-$name-" "$scratch" "$root/tests/fuzz/corpus/$name" >"$log" 2>&1 || status=$?
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$log" || true
  if [[ $status -ne 0 ]]; then
    grep -E -A30 '^(==[0-9]+==|fuzz property)|runtime error|uncaught' "$log" | head -60 >&2 || tail -40 "$log" >&2
    echo "fuzz.sh: $name found a failing input (exit $status; see $dir/crash-$name-* and $log)" >&2
    exit 1
  fi
done
echo "== fuzz: clean (${targets[*]}, ${seconds} s each)"
