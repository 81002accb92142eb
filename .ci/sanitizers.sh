#!/usr/bin/env bash
# Builds every test executable (and the examples they run: train_gpt, tpipe-plan, the soak and
# fuzz-corpus programs) under AddressSanitizer + UndefinedBehaviorSanitizer and under
# ThreadSanitizer, MPI included, each in its own build directory at -O1, and runs the whole CTest
# suite there. Excluded, and why: install_consumer (builds a consumer with the plain compiler:
# nothing instrumented runs), diagnostics_* (compile-only), pytorch_* (PyTorch runs the CSVs;
# tpipe-plan only writes them, and it runs under the sanitizers in errors_table), state_crash_* (SIGKILL
# restart loops of train_gpt: what they check, bitwise resume, runs instrumented in state and
# state_resume_shapes; instrumented, the loops only take longer).
#
#   .ci/sanitizers.sh                 # both
#   .ci/sanitizers.sh thread          # only TSan
#   .ci/sanitizers.sh address         # only ASan + UBSan
#
# Open MPI's own leaks and races (its progress engine and shared-memory transport are not
# instrumented) are suppressed by library only: .ci/lsan.supp and .ci/tsan.supp name libmpi,
# libopen-pal and libopen-rte frames and nothing of tpipe.
#
# Environment: BUILD_ROOT (default: <repo>/build-sanitizers), JOBS (default: 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_root=${BUILD_ROOT:-$root/build-sanitizers}
jobs=${JOBS:-2}
kinds=("$@")
[[ ${#kinds[@]} -eq 0 ]] && kinds=(address thread)
excluded='^(install_consumer|diagnostics_.*|pytorch_.*|state_crash_.*)$'

export LSAN_OPTIONS="suppressions=$root/.ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
for kind in "${kinds[@]}"; do
  case $kind in
    thread)  flags="-fsanitize=thread"
             # ignore_noninstrumented_modules: accesses made inside Open MPI (e.g. its progress
             # thread's memcpy into a receive buffer) are synchronised by atomics TSan cannot see;
             # tpipe's own code stays fully checked.
             export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$root/.ci/tsan.supp"
             ;;
    address) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
             export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1"
             ;;
    *) echo "sanitizers.sh: unknown kind '$kind' (use thread or address)" >&2; exit 2 ;;
  esac
  dir=$build_root/$kind
  start=$(date +%s)
  echo "== $kind: configure $dir"
  # Warnings are checked by the regular -Werror build; sanitizer builds must not fail on
  # sanitizer-specific diagnostics (e.g. GCC's -Wtsan).
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=None \
        -DCMAKE_CXX_FLAGS="-O1 -g $flags -fno-omit-frame-pointer" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" \
        -DTPIPE_WERROR=OFF -DTPIPE_BUILD_TESTS=ON -DTPIPE_BUILD_EXAMPLES=ON -DTPIPE_BUILD_BENCHMARKS=OFF \
        -DTPIPE_ENABLE_MPI=ON >/dev/null
  # Only what ctest runs: the test suites and the programs the tests start (not the header
  # self-containment checks, which the regular build compiles and which run nothing).
  targets=$(cmake --build "$dir" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p' |
            grep -E '^(tpipe_tests_.*|tpipe_mpi_crash|tpipe_soak|train_gpt|tpipe-plan)$' | tr '\n' ' ')
  echo "== $kind: build $targets"
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$jobs" --target $targets
  built=$(date +%s)
  echo "== $kind: ctest (all but $excluded)"
  if [[ $kind == address ]]; then
    # tpipe_tests_mpi's runs (mpi_np*, mpi_progress_*) end with leaks that LeakSanitizer cannot
    # attribute (Open MPI's plugins are unloaded at MPI_Finalize: "<unknown module>", which no
    # suppression can name): there, addresses and UB are checked, leaks are not. Every other
    # test, the other MPI programs included, runs with the leak check.
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" -E "$excluded|^(mpi_np.*|mpi_progress_.*)$"
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --test-dir "$dir" --output-on-failure -j"$jobs" -R '^(mpi_np.*|mpi_progress_.*)$'
  else
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" -E "$excluded"
  fi
  echo "== $kind: built in $((built - start)) s, tested in $(( $(date +%s) - built )) s"
done
echo "== sanitizers: clean (${kinds[*]})"
