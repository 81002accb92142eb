#!/usr/bin/env bash
# Builds the runtime test suites (tpipe_tests_exec, tpipe_tests_comm) under ThreadSanitizer and under
# AddressSanitizer + UndefinedBehaviorSanitizer, each in its own build directory, and runs it.
#
#   .ci/sanitizers.sh                 # both
#   .ci/sanitizers.sh thread          # only TSan
#   .ci/sanitizers.sh address         # only ASan + UBSan
#
# Environment: BUILD_ROOT (default: <repo>/build-sanitizers), JOBS (default: 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_root=${BUILD_ROOT:-$root/build-sanitizers}
jobs=${JOBS:-2}
kinds=("$@")
[[ ${#kinds[@]} -eq 0 ]] && kinds=(thread address)

for kind in "${kinds[@]}"; do
  case $kind in
    thread)  flags="-fsanitize=thread" ;;
    address) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined" ;;
    *) echo "sanitizers.sh: unknown kind '$kind' (use thread or address)" >&2; exit 2 ;;
  esac
  dir=$build_root/$kind
  echo "== $kind: configure $dir"
  # Warnings are checked by the regular -Werror build; sanitizer builds must not fail on
  # sanitizer-specific diagnostics (e.g. GCC's -Wtsan).
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DCMAKE_CXX_FLAGS="$flags -fno-omit-frame-pointer" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" \
        -DTPIPE_WERROR=OFF -DTPIPE_BUILD_BENCHMARKS=OFF -DTPIPE_BUILD_EXAMPLES=OFF >/dev/null
  echo "== $kind: build tpipe_tests_exec tpipe_tests_comm"
  cmake --build "$dir" -j"$jobs" --target tpipe_tests_exec tpipe_tests_comm
  for suite in exec comm; do
    echo "== $kind: run tpipe_tests_$suite"
    TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1" \
    UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1" \
      "$dir/tests/tpipe_tests_$suite"
  done
done
echo "== sanitizers: clean (${kinds[*]})"
